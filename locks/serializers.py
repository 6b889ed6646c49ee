"""Answers about selections and the lock table (requests: locks.request_serializers)."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import ISO_8601, serializers
from rest_framework.settings import api_settings

from common.rules import AMOUNT_PATTERN
from locks.models import Selection, TokenLock
from locks.selections import selection_tokens
from tokens.models import Token
from tokens.serializers import (
    AmountField,
)

# Every select, spend, release and extend answers a selection. DRF builds a serializer's fields
# afresh for each instance (a deep copy of the declared ones, a model lookup per model field),
# which cost more than the statement behind the answer. The answers' serializers therefore
# write their representation out (``to_representation``) and never build their fields; the
# declared fields still describe the schema, and tests hold each written-out representation
# equal to the field-by-field one. These unbound fields format values exactly as bound ones do.
_DATETIME = serializers.DateTimeField()


def _datetime(value, zone=None):
    """Format ``value`` as DateTimeField does; ``zone``: the current time zone, read once."""
    if value is None:
        return None
    # DRF's own steps for an aware datetime and ISO 8601, without its per-value lookups.
    if (
        zone is not None
        and type(value) is datetime
        and value.tzinfo is not None
        and api_settings.DATETIME_FORMAT.lower() == ISO_8601
    ):
        text = value.astimezone(zone).isoformat()
        return text[:-6] + "Z" if text.endswith("+00:00") else text
    return _DATETIME.to_representation(value)


def _amount(value) -> str:
    return str(int(value))


# The strategies that take no terms of their own.
class SelectedTokenSerializer(serializers.Serializer):
    """A token held by a selection."""

    tx_id = serializers.CharField()
    index = serializers.IntegerField()
    quantity = AmountField()

    def to_representation(self, token: Token) -> dict:
        return {
            "tx_id": str(token.tx_id),
            "index": int(token.index),
            "quantity": _amount(token.quantity),
        }


_SELECTED_TOKEN = SelectedTokenSerializer()


class LegResultSerializer(serializers.Serializer):
    """One leg of a multi-currency selection: what it asked, what it holds."""

    currency = serializers.CharField()
    quantity = AmountField()
    total = AmountField(help_text="Sum of the leg's tokens.")
    change = AmountField(help_text="total - quantity.")
    tokens = SelectedTokenSerializer(many=True)


class SelectionSerializer(serializers.ModelSerializer):
    """A selection and the tokens it holds (or held)."""

    quantity = AmountField()
    total = AmountField(help_text="Sum of the selected tokens.")
    change = serializers.SerializerMethodField(help_text="total - quantity.")
    inputs = serializers.SerializerMethodField(help_text="How many tokens it holds.")
    tokens = serializers.SerializerMethodField()
    legs = serializers.SerializerMethodField(
        help_text="Several currencies: each leg with its tokens (currency, quantity and total "
        "above are the first leg's, tokens all of them); null for one currency."
    )
    status = serializers.ChoiceField(
        choices=Selection.Status.choices,
        source="reported_status",
        read_only=True,
        help_text="locked until spent or released; expired once its lease ran out; lost when "
        "its locks were removed or taken over while it ran.",
    )

    class Meta:
        model = Selection
        fields = [
            "tx_id",
            "wallet",
            "currency",
            "quantity",
            "total",
            "change",
            "inputs",
            "strategy",
            "tokens",
            "legs",
            "status",
            "fence",
            "created_at",
            "expires_at",
            "spent_at",
            "released_at",
        ]
        read_only_fields = fields

    def to_representation(self, selection: Selection) -> dict:
        zone = timezone.get_current_timezone() if settings.USE_TZ else None
        return {
            "tx_id": selection.tx_id,
            "wallet": selection.wallet,
            "currency": selection.currency,
            "quantity": _amount(selection.quantity),
            "total": _amount(selection.total),
            "change": self.get_change(selection),
            "inputs": self.get_inputs(selection),
            "strategy": selection.strategy,
            "tokens": self.get_tokens(selection),
            "legs": self.get_legs(selection),
            "status": str(selection.reported_status),
            "fence": None if selection.fence is None else int(selection.fence),
            "created_at": _datetime(selection.created_at, zone),
            "expires_at": _datetime(selection.expires_at, zone),
            "spent_at": _datetime(selection.spent_at, zone),
            "released_at": _datetime(selection.released_at, zone),
        }

    @extend_schema_field({"type": "string", "pattern": AMOUNT_PATTERN})
    def get_change(self, selection: Selection) -> str:
        return str(int(selection.total - selection.quantity))

    def get_inputs(self, selection: Selection) -> int:
        return len(selection.token_ids)

    @extend_schema_field(SelectedTokenSerializer(many=True))
    def get_tokens(self, selection: Selection) -> list:
        return [_SELECTED_TOKEN.to_representation(token) for token in self._tokens(selection)]

    @extend_schema_field(LegResultSerializer(many=True, allow_null=True))
    def get_legs(self, selection: Selection) -> list | None:
        if selection.legs is None:
            return None
        tokens = self._tokens(selection)
        return [
            {
                "currency": leg["currency"],
                "quantity": leg["quantity"],
                "total": leg["total"],
                "change": str(int(leg["total"]) - int(leg["quantity"])),
                "tokens": [
                    _SELECTED_TOKEN.to_representation(token)
                    for token in tokens
                    if token.currency == leg["currency"]
                ],
            }
            for leg in selection.legs
        ]

    def _tokens(self, selection: Selection) -> list:
        by_id = self.context.get("tokens_by_id")
        held = getattr(selection, "held_tokens", None)
        if held is not None:
            return held  # what the selecting statement returned
        if by_id is None:
            return selection_tokens(selection)
        return [by_id[pk] for pk in selection.token_ids if pk in by_id]


def tokens_by_id(selections: list[Selection]) -> dict[int, Token]:
    """Load the tokens of many selections in one query (for listings)."""
    ids = {pk for selection in selections for pk in selection.token_ids}
    return Token.objects.in_bulk(ids)


class OutputTokenSerializer(serializers.Serializer):
    """A token created by a spend."""

    tx_id = serializers.CharField()
    index = serializers.IntegerField()
    wallet = serializers.CharField()
    currency = serializers.CharField()
    quantity = AmountField()

    def to_representation(self, token: Token) -> dict:
        return {
            "tx_id": str(token.tx_id),
            "index": int(token.index),
            "wallet": str(token.wallet),
            "currency": str(token.currency),
            "quantity": _amount(token.quantity),
        }


_OUTPUT_TOKEN = OutputTokenSerializer()


class SpendResultSerializer(SelectionSerializer):
    """A spent selection and the outputs its spend created."""

    outputs = serializers.SerializerMethodField()

    class Meta(SelectionSerializer.Meta):
        fields = [*SelectionSerializer.Meta.fields, "outputs"]
        read_only_fields = fields

    def to_representation(self, selection: Selection) -> dict:
        return {**super().to_representation(selection), "outputs": self.get_outputs(selection)}

    @extend_schema_field(OutputTokenSerializer(many=True))
    def get_outputs(self, selection: Selection) -> list:
        outputs = getattr(selection, "created_outputs", None)
        if outputs is None:
            # Exactly the tokens its spend created, whatever else shares the tx id.
            by_id = Token.objects.in_bulk(selection.output_ids)
            outputs = [by_id[pk] for pk in selection.output_ids if pk in by_id]
        return [_OUTPUT_TOKEN.to_representation(token) for token in outputs]


# One instance of each answers every request: DRF sets a serializer up afresh for each instance
# (its fields' error messages, walked up the class tree), which cost more than writing the answer.
# Their representations read nothing of the instance but its empty context.
_SELECTION = SelectionSerializer()
_SPEND_RESULT = SpendResultSerializer()


def selection_body(selection: Selection) -> dict:
    """Return one selection's answer (select, read, release, extend)."""
    return _SELECTION.to_representation(selection)


def spend_body(selection: Selection) -> dict:
    """Return a spent selection's answer with the outputs its spend created."""
    return _SPEND_RESULT.to_representation(selection)


class LockSerializer(serializers.ModelSerializer):
    """A row of the lock table with its token."""

    token = serializers.CharField(source="token.__str__", help_text="tx_id:index")
    wallet = serializers.CharField(source="token.wallet")
    currency = serializers.CharField(source="token.currency")
    quantity = AmountField(source="token.quantity")
    state = serializers.ChoiceField(choices=["live", "expired"], read_only=True)

    class Meta:
        model = TokenLock
        fields = [
            "token",
            "wallet",
            "currency",
            "quantity",
            "spender_tx_id",
            "fence",
            "created_at",
            "expires_at",
            "state",
        ]
        read_only_fields = fields
