"""What clients send about selections: the select request (by strategy, with legs), spend, extend.

Each request serializer validates the everyday request with its fields' quick checks
(``common.serializers.QuickSerializer``); DRF words the errors of the rest.
"""

from __future__ import annotations

from django.core.validators import MaxLengthValidator, MinLengthValidator
from drf_spectacular.drainage import get_override, set_override
from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers

from common.rules import at_most
from common.serializers import SLOW, QuickSerializer
from sherdlock import MAX_QUANTITY
from sherdlock.legs import MAX_LEGS, MIN_LEGS
from sherdlock.strategies import (
    CONSOLIDATE,
    EXACT,
    FEWEST_TOKENS,
    MAX_TOKENS,
    RANDOM,
    SMALLEST_FIRST,
)
from tokens.serializers import (
    IdentifierField,
    QuantityField,
    StrictIntegerField,
    currency_field,
    index_field,
    item_list,
    reject_duplicate_indexes,
)
from tokens.services import TokenSpec

MAX_EXTEND_SECONDS = 86400
MAX_WAIT_SECONDS = 60
PLAIN_STRATEGIES = [RANDOM, SMALLEST_FIRST, FEWEST_TOKENS]


class SelectRequestSerializer(QuickSerializer):
    """Lock tokens of ``wallet`` worth at least ``quantity`` of ``currency`` for ``tx_id``."""

    # The tx_id is a path segment of /selections/{tx_id}/: a "/" would make it unreachable.
    tx_id = IdentifierField(
        path=True,
        help_text=('The spending transaction; names the selection. No "/": it is a path segment.'),
    )
    wallet = IdentifierField()
    currency = currency_field()
    quantity = QuantityField()
    wait = StrictIntegerField(
        required=False,
        min_value=0,
        max_value=MAX_WAIT_SECONDS,
        help_text="Seconds this request may wait for funds others hold (as Prefer: wait=N): it "
        "waits its turn behind earlier waiters of the wallet and currency and is "
        "answered as soon as it gets the funds. 0 or absent: answer at once.",
    )

    # The strategies with terms of their own narrow this to their one name.
    strategy: serializers.Field = serializers.ChoiceField(
        choices=PLAIN_STRATEGIES,
        required=False,
        help_text="How to pick the tokens. random (default): a random covering set, fair "
        "across replicas. smallest_first: ascending by quantity, equal ones shuffled. "
        "fewest_tokens: largest first. exact and consolidate take terms of their own.",
    )

    def validate(self, data: dict) -> dict:
        # Terms of another strategy are refused, not ignored: the caller asked for something
        # this strategy would not do.
        foreign = [name for name in STRATEGY_TERMS if name in self.initial_data]
        foreign = [name for name in foreign if name not in self._declared_fields]
        if foreign:
            raise serializers.ValidationError(
                {name: [f"Only with strategy {STRATEGY_TERMS[name]}."] for name in foreign}
            )
        return data


# Which strategy takes each term.
STRATEGY_TERMS = {"max_change": EXACT, "fallback": EXACT, "max_tokens": CONSOLIDATE}
CHANGE_PATTERN = f"^(?:0|{at_most(MAX_QUANTITY)})$"


class StrategyNameField(serializers.CharField):
    """The one strategy name a request serializer stands for (an enum of one in the schema)."""

    def __init__(self, name: str, **kwargs) -> None:
        super().__init__(help_text=f"{name}.", **kwargs)
        self.name = name
        set_override(self, "field", {"type": "string", "enum": [name]})

    def quick(self, data: object) -> object:
        """The valid value, as ``run_validation`` returns it; otherwise ``SLOW``."""
        return self.name if type(data) is str and data == self.name else SLOW

    def to_internal_value(self, data: object) -> str:
        if data != self.name:
            self.fail("invalid")
        return self.name


class ChangeField(QuantityField):
    """A quantity that may be 0: 0..2**64-1 as a string of digits, no leading zero."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        schema = {**get_override(self, "field"), "pattern": CHANGE_PATTERN, "example": "0"}
        schema["description"] = f"An integer 0..{MAX_QUANTITY} as a string of digits, no leading 0."
        set_override(self, "field", schema)

    def quick(self, data: object) -> object:
        """The valid value, as ``run_validation`` returns it; otherwise ``SLOW``."""
        return 0 if type(data) is str and data == "0" else super().quick(data)

    def to_internal_value(self, data: object) -> int:
        return 0 if data == "0" else super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """true or false as JSON booleans (not strings or numbers)."""

    def quick(self, data: object) -> object:
        """The valid value, as ``run_validation`` returns it; otherwise ``SLOW``."""
        return data if type(data) is bool else SLOW

    def to_internal_value(self, data: object) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class ExactSelectRequestSerializer(SelectRequestSerializer):
    """Lock tokens whose total is ``quantity``, or exceeds it by at most ``max_change``."""

    strategy = StrategyNameField(EXACT)
    max_change = ChangeField(
        required=False,
        help_text="How far the total may exceed quantity (default 0: no change). The search "
        "runs over the largest free tokens not above quantity + max_change (a bounded window).",
    )
    fallback = StrictBooleanField(
        required=False,
        help_text="When no set is within max_change, select as random instead of answering "
        "409 no_exact_match.",
    )


class ConsolidateSelectRequestSerializer(SelectRequestSerializer):
    """Lock the smallest tokens, up to ``max_tokens``, covering ``quantity`` (sweeps dust)."""

    strategy = StrategyNameField(CONSOLIDATE)
    max_tokens = StrictIntegerField(
        required=False,
        min_value=1,
        max_value=MAX_TOKENS,
        help_text="The most tokens to lock (default 100); 409 max_tokens_exceeded when even "
        "the largest that many cannot cover quantity.",
    )


class LegSerializer(serializers.Serializer):
    """One currency of a multi-currency selection and the quantity to lock in it."""

    currency = currency_field()
    quantity = QuantityField()


def legs_field() -> serializers.ListSerializer:
    """Return the ``legs`` of a multi-currency request."""
    return serializers.ListSerializer(
        child=LegSerializer(),
        allow_empty=False,
        min_length=MIN_LEGS,
        max_length=MAX_LEGS,
        validators=[MinLengthValidator(MIN_LEGS), MaxLengthValidator(MAX_LEGS)],
        help_text=f"{MIN_LEGS} to {MAX_LEGS} legs, each in another currency: all are locked "
        "for tx_id, or none. Not with currency and quantity.",
    )


class LegsRequestMixin:
    """A selection of several currencies: ``legs`` instead of ``currency`` and ``quantity``."""

    initial_data: dict

    def validate_legs(self, legs: list[dict]) -> list[dict]:
        currencies = [leg["currency"] for leg in legs]
        if len(set(currencies)) != len(currencies):
            raise serializers.ValidationError("Each currency may be one leg only.")
        return legs

    def validate(self, data: dict) -> dict:
        # One shape or the other, never both: the caller would not know which was selected.
        both = [name for name in ("currency", "quantity") if name in self.initial_data]
        if both:
            raise serializers.ValidationError({name: ["Not with legs."] for name in both})
        if "wait" in self.initial_data:
            raise serializers.ValidationError(
                {"wait": ["Not with legs: a selection of several currencies does not wait."]}
            )
        return super().validate(data)  # type: ignore[misc]


def _legs_variant(base: type[SelectRequestSerializer]) -> type[SelectRequestSerializer]:
    """Return ``base`` taking ``legs`` (component ``Legs<base>`` in the schema)."""
    name = base.__name__.replace("SelectRequest", "LegsSelectRequest")
    doc = f"As {base.__name__.removesuffix('Serializer')}, for every leg of ``legs``."
    # The serializer metaclass reads declared fields from the class body only: None removes
    # the base's field.
    body = {"currency": None, "quantity": None, "wait": None, "legs": legs_field()}
    return type(name, (LegsRequestMixin, base), {**body, "__doc__": doc, "__module__": __name__})


LegsSelectRequestSerializer = _legs_variant(SelectRequestSerializer)
ExactLegsSelectRequestSerializer = _legs_variant(ExactSelectRequestSerializer)
ConsolidateLegsSelectRequestSerializer = _legs_variant(ConsolidateSelectRequestSerializer)

SELECT_REQUESTS = {
    EXACT: ExactSelectRequestSerializer,
    CONSOLIDATE: ConsolidateSelectRequestSerializer,
}
LEGS_REQUESTS = {
    EXACT: ExactLegsSelectRequestSerializer,
    CONSOLIDATE: ConsolidateLegsSelectRequestSerializer,
}
# The request as the schema shows it: one of six shapes, told apart by ``strategy`` and by
# ``legs`` (several currencies) against ``currency`` and ``quantity`` (one).
SELECT_REQUEST_SCHEMA = PolymorphicProxySerializer(
    component_name="SelectRequestByStrategy",
    serializers=[
        SelectRequestSerializer,
        ExactSelectRequestSerializer,
        ConsolidateSelectRequestSerializer,
        LegsSelectRequestSerializer,
        ExactLegsSelectRequestSerializer,
        ConsolidateLegsSelectRequestSerializer,
    ],
    resource_type_field_name=None,
)


def select_request(data: object) -> SelectRequestSerializer:
    """Return the serializer for a selection request, chosen by the strategy it names."""
    name = data.get("strategy") if isinstance(data, dict) else None
    if isinstance(data, dict) and "legs" in data:
        legs = (
            LEGS_REQUESTS.get(name, LegsSelectRequestSerializer) if isinstance(name, str) else None
        )
        return (legs or LegsSelectRequestSerializer)(data=data)
    chosen = SELECT_REQUESTS.get(name, SelectRequestSerializer) if isinstance(name, str) else None
    return (chosen or SelectRequestSerializer)(data=data)


class OutputSerializer(serializers.Serializer):
    """A token a spend creates, as output ``index`` of the selection's transaction."""

    index = index_field()
    wallet = IdentifierField(help_text="Any wallet: outputs pay others or give change.")
    currency = currency_field()
    quantity = QuantityField()


class SpendSerializer(QuickSerializer):
    """The outputs of the spending transaction; they must add up to the selection's total."""

    outputs = item_list(OutputSerializer())

    def validate_outputs(self, outputs: list[dict]) -> list[dict]:
        reject_duplicate_indexes(outputs, ("index",), "output index")
        return outputs

    def specs(self, tx_id: str) -> list[TokenSpec]:
        return [TokenSpec(tx_id=tx_id, **output) for output in self.validated_data["outputs"]]


class ExtendSerializer(QuickSerializer):
    """How long to extend the lease by; the service caps it at the selection's maximum."""

    seconds = StrictIntegerField(
        required=False,
        min_value=1,
        max_value=MAX_EXTEND_SECONDS,
        help_text="Lease length from now, in seconds; default: the configured lease.",
    )
