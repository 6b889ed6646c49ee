"""Wire formats for tokens: strict fields shared by the API, issue requests, token listings.

Quantities travel as strings of digits because JSON numbers lose precision above 2**53 in most
clients; identifiers must be strings (DRF would otherwise turn ``123`` into ``"123"``).
"""

from __future__ import annotations

import re
from decimal import Decimal

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from sherdlock import MAX_QUANTITY
from tokens.models import CURRENCY_MAX_LENGTH, ID_MAX_LENGTH, Token
from tokens.services import TokenSpec

MAX_TOKENS_PER_REQUEST = 1000
MAX_INDEX = 2**31 - 1  # the column is a PostgreSQL integer
_DIGITS = re.compile(r"[0-9]+")


def is_identifier(value: object, max_length: int = ID_MAX_LENGTH) -> bool:
    """Tell whether ``value`` is a usable name: a printable, non-blank string within bounds."""
    # Printable excludes NUL and lone surrogates, which PostgreSQL cannot store.
    return (isinstance(value, str) and 0 < len(value) <= max_length and value.isprintable()
            and not value.isspace())


@extend_schema_field({
    "type": "string", "pattern": "^[0-9]+$", "example": "100",
    "description": "An integer as a string of digits; in requests 1..18446744073709551615.",
})
class QuantityField(serializers.Field):
    """An integer quantity 1..2**64-1 written as a string of ASCII digits."""

    default_error_messages = {
        "invalid": "Must be a string of digits, e.g. \"100\" (no sign, fraction or exponent).",
        "min_value": "Must be at least 1.",
        "max_value": f"Must be at most {MAX_QUANTITY}.",
    }

    def to_internal_value(self, data: object) -> int:
        if not isinstance(data, str) or not _DIGITS.fullmatch(data):
            self.fail("invalid")
        # Bound the length before converting so a megabyte of digits costs nothing.
        if len(data.lstrip("0")) > len(str(MAX_QUANTITY)):
            self.fail("max_value")
        value = int(data)
        if value < 1:
            self.fail("min_value")
        if value > MAX_QUANTITY:
            self.fail("max_value")
        return value

    def to_representation(self, value: int | Decimal) -> str:
        return str(int(value))


class IdentifierField(serializers.CharField):
    """A non-blank, printable string (never a number coerced to one)."""

    default_error_messages = {"printable": "Must not contain control characters."}

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("max_length", ID_MAX_LENGTH)
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: object) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        if data.isspace():
            self.fail("blank")
        if not data.isprintable():
            self.fail("printable")
        return data


class StrictIntegerField(serializers.IntegerField):
    """An integer given as a JSON integer (not a string, float or boolean)."""

    def to_internal_value(self, data: object) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return data


def index_field() -> StrictIntegerField:
    return StrictIntegerField(min_value=0, max_value=MAX_INDEX)


def currency_field(**kwargs) -> IdentifierField:
    return IdentifierField(max_length=CURRENCY_MAX_LENGTH, **kwargs)


def reject_duplicate_indexes(items: list[dict], key: tuple[str, ...], label: str) -> None:
    """Raise a validation error when two items share the identity ``key``."""
    seen: set[tuple] = set()
    for position, item in enumerate(items):
        identity = tuple(item[k] for k in key)
        if identity in seen:
            raise serializers.ValidationError(
                f"Item {position} repeats {label} {':'.join(map(str, identity))}.")
        seen.add(identity)


class TokenSpecSerializer(serializers.Serializer):
    """One token to issue."""

    tx_id = IdentifierField()
    index = index_field()
    wallet = IdentifierField()
    currency = currency_field()
    quantity = QuantityField()


class IssueSerializer(serializers.Serializer):
    """A batch of tokens to issue (1..1000, distinct identities)."""

    tokens = TokenSpecSerializer(many=True, allow_empty=False, max_length=MAX_TOKENS_PER_REQUEST)

    def validate_tokens(self, tokens: list[dict]) -> list[dict]:
        reject_duplicate_indexes(tokens, ("tx_id", "index"), "token")
        return tokens

    def specs(self) -> list[TokenSpec]:
        return [TokenSpec(**token) for token in self.validated_data["tokens"]]


class TokenSerializer(serializers.ModelSerializer):
    """A stored token."""

    quantity = QuantityField()
    spent = serializers.BooleanField(source="is_spent")

    class Meta:
        model = Token
        fields = ["tx_id", "index", "wallet", "currency", "quantity", "created_at", "spent",
                  "spent_by", "spent_at"]
        read_only_fields = fields


class IssueResultSerializer(serializers.Serializer):
    """What an issue request stored: every token of the request and how many were new."""

    created = serializers.IntegerField(help_text="How many of the tokens were new.")
    tokens = TokenSerializer(many=True)


class BalanceSerializer(serializers.Serializer):
    """A wallet's quantities in one currency."""

    currency = serializers.CharField()
    unspent = QuantityField(help_text="Sum of unspent tokens.")
    locked = QuantityField(help_text="Part of unspent held by live locks.")
    available = QuantityField(help_text="unspent - locked.")


class WalletBalancesSerializer(serializers.Serializer):
    """A wallet's balances, one entry per currency it holds unspent tokens in."""

    wallet = serializers.CharField()
    balances = BalanceSerializer(many=True)
