"""Wire formats for tokens: strict fields shared by the API, issue requests, token listings.

Quantities travel as strings of digits because JSON numbers lose precision above 2**53 in most
clients; identifiers must be strings (DRF would otherwise turn ``123`` into ``"123"``).
"""

from __future__ import annotations

import re
from decimal import Decimal

from django.core.validators import MaxLengthValidator, MinLengthValidator
from drf_spectacular.drainage import set_override
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from common.rules import (
    AMOUNT_PATTERN,
    CURRENCY_MAX_LENGTH,
    ID_MAX_LENGTH,
    MAX_QUANTITY_DIGITS,
    QUANTITY_PATTERN,
    identifier_problem,
    identifier_schema,
    is_identifier,
)
from common.serializers import SLOW
from sherdlock import MAX_QUANTITY
from tokens.models import Token
from tokens.services import TokenSpec

MAX_TOKENS_PER_REQUEST = 1000
MAX_INDEX = 2**31 - 1  # the column is a PostgreSQL integer
_QUANTITY = re.compile(QUANTITY_PATTERN)


class QuantityField(serializers.Field):
    """An integer quantity 1..2**64-1 written as a string of ASCII digits, no leading zero."""

    default_error_messages = {
        "invalid": 'Must be a string of digits, e.g. "100" (no sign, fraction or exponent).',
        "leading_zero": "Must not start with 0.",
        "min_value": "Must be at least 1.",
        "max_value": f"Must be at most {MAX_QUANTITY}.",
    }

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        set_override(
            self,
            "field",
            {
                "type": "string",
                "pattern": QUANTITY_PATTERN,
                "minLength": 1,
                "maxLength": MAX_QUANTITY_DIGITS,
                "example": "100",
                "description": f"An integer 1..{MAX_QUANTITY} as a string of digits, no leading 0.",
            },
        )

    def quick(self, data: object) -> object:
        """The valid value, as ``run_validation`` returns it; otherwise ``SLOW``."""
        if type(data) is str and _QUANTITY.fullmatch(data):
            return int(data)
        return SLOW

    def to_internal_value(self, data: object) -> int:
        # The schema's pattern decides; the checks below only choose the message.
        if isinstance(data, str) and _QUANTITY.fullmatch(data):
            return int(data)
        if not isinstance(data, str) or not data.isascii() or not data.isdigit():
            self.fail("invalid")
        if data.strip("0") == "":
            self.fail("min_value")
        if data.startswith("0"):
            self.fail("leading_zero")
        self.fail("max_value")

    def to_representation(self, value: int | Decimal) -> str:
        return str(int(value))


@extend_schema_field(
    {
        "type": "string",
        "pattern": AMOUNT_PATTERN,
        "example": "100",
        "description": "An integer as a string of digits.",
    }
)
class AmountField(serializers.Field):
    """A stored quantity or a sum of them, written as a string of digits (responses only)."""

    def __init__(self, **kwargs) -> None:
        kwargs["read_only"] = True
        super().__init__(**kwargs)

    def to_representation(self, value: int | Decimal) -> str:
        return str(int(value))


class IdentifierField(serializers.CharField):
    """A name: 1..max_length characters, no control characters, not only whitespace.

    ``path``: the name is also a URL path segment, so "/" is refused too. Numbers are not
    coerced to strings.
    """

    default_error_messages = {
        "printable": "Must not contain control characters.",
        "slash": 'Must not contain "/".',
    }

    def __init__(self, path: bool = False, **kwargs) -> None:
        max_length = kwargs.setdefault("max_length", ID_MAX_LENGTH)
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)
        self.path = path
        set_override(self, "field", identifier_schema(max_length, path=path))

    def quick(self, data: object) -> object:
        """The valid value, as ``run_validation`` returns it; otherwise ``SLOW``."""
        if (
            type(data) is str
            and is_identifier(data, max_length=self.max_length or ID_MAX_LENGTH, path=self.path)
            and (self.min_length is None or len(data) >= self.min_length)
        ):
            return data
        return SLOW

    def to_internal_value(self, data: object) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        # Empty and too long are the validators' (blank, max_length); the rest is the pattern's.
        if data and not is_identifier(data, max_length=len(data), path=self.path):
            self.fail(identifier_problem(data))
        return data


class StrictIntegerField(serializers.IntegerField):
    """An integer given as a JSON number (not a string or a boolean).

    ``1.0`` and ``1e3`` are integers to JSON Schema, so they are accepted as 1 and 1000; a
    fraction is refused.
    """

    def quick(self, data: object) -> object:
        """The valid value, as ``run_validation`` returns it; otherwise ``SLOW``."""
        if (
            type(data) is int
            and (self.min_value is None or data >= self.min_value)
            and (self.max_value is None or data <= self.max_value)
        ):
            return data
        return SLOW

    def to_internal_value(self, data: object) -> int:
        if isinstance(data, float) and data.is_integer():
            data = int(data)
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return data


def item_list(child: serializers.Serializer, **kwargs) -> serializers.ListSerializer:
    """Return a list of 1..MAX_TOKENS_PER_REQUEST ``child`` items.

    The list checks its bounds itself (``min_length``, ``max_length``, with its own messages)
    before its items; the validators, which never fail first, publish the same bounds in the
    schema (minItems, maxItems).
    """
    return serializers.ListSerializer(
        child=child,
        allow_empty=False,
        min_length=1,
        max_length=MAX_TOKENS_PER_REQUEST,
        validators=[MinLengthValidator(1), MaxLengthValidator(MAX_TOKENS_PER_REQUEST)],
        **kwargs,
    )


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
                f"Item {position} repeats {label} {':'.join(map(str, identity))}."
            )
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

    tokens = item_list(TokenSpecSerializer())

    def validate_tokens(self, tokens: list[dict]) -> list[dict]:
        reject_duplicate_indexes(tokens, ("tx_id", "index"), "token")
        return tokens

    def specs(self) -> list[TokenSpec]:
        return [TokenSpec(**token) for token in self.validated_data["tokens"]]


class TokenSerializer(serializers.ModelSerializer):
    """A stored token."""

    quantity = AmountField()
    spent = serializers.BooleanField(source="is_spent")
    # The spending transaction, shown only to the client that ran it (with_spender_seen_by).
    spent_by = serializers.CharField(source="seen_spent_by", allow_null=True, read_only=True)

    class Meta:
        model = Token
        fields = [
            "tx_id",
            "index",
            "wallet",
            "currency",
            "quantity",
            "created_at",
            "spent",
            "spent_by",
            "spent_at",
        ]
        read_only_fields = fields


class IssueResultSerializer(serializers.Serializer):
    """What an issue request stored: every token of the request and how many were new."""

    created = serializers.IntegerField(help_text="How many of the tokens were new.")
    tokens = TokenSerializer(many=True)


class BalanceSerializer(serializers.Serializer):
    """A wallet's quantities in one currency."""

    currency = serializers.CharField()
    unspent = AmountField(help_text="Sum of unspent tokens.")
    locked = AmountField(help_text="Part of unspent held by live locks.")
    available = AmountField(help_text="unspent - locked.")


class WalletBalancesSerializer(serializers.Serializer):
    """A wallet's balances, one entry per currency it holds unspent tokens in."""

    wallet = serializers.CharField()
    balances = BalanceSerializer(many=True)
