"""Request validation in two ways: plain checks for the common valid request, DRF for the rest.

DRF builds a serializer's fields afresh for every instance (a deep copy of the declared ones)
and validates field by field through several layers of calls; on the selection endpoints that
cost more than the statement behind the answer. ``QuickSerializer`` first runs the ``quick``
check of each field its class declares, on the class's own unbound fields: when every value
passes, and the serializer's ``validate_<field>`` and ``validate`` hooks accept the result,
that is the validated data. Anything else (a missing value, a wrong type, a value out of range,
a hook that objects) goes the whole DRF way, which words the errors. A field without a
``quick`` check sends its serializer the DRF way every time.

A ``quick`` check takes the raw value and returns what DRF's ``run_validation`` would return
for it, or ``SLOW`` when it cannot vouch for the value. The property tests of
tests/integration/api/test_quick_validation.py hold the two ways equal.
"""

from __future__ import annotations

from typing import Any

from django.core.validators import MaxLengthValidator, MinLengthValidator
from rest_framework import serializers
from rest_framework.fields import empty


class _Slow:
    def __repr__(self) -> str:
        return "SLOW"


SLOW: Any = _Slow()  # "ask DRF": what a quick check returns when it cannot vouch for a value


def quick(field: serializers.Field, data: object) -> object:
    """Return what ``field.run_validation(data)`` returns, or ``SLOW`` to let DRF decide."""
    check = getattr(field, "quick", None)
    if check is not None:
        return check(data)
    if type(field) is serializers.ChoiceField:
        return _quick_choice(field, data)
    if isinstance(field, serializers.ListSerializer):
        return _quick_list(field, data)
    if isinstance(field, serializers.Serializer):
        return _quick_mapping(field, data)
    return SLOW


def _quick_choice(field: serializers.ChoiceField, data: object) -> object:
    if type(data) is not str or field.validators:
        return SLOW
    return field.choice_strings_to_values.get(data, SLOW)


def _quick_list(field: serializers.ListSerializer, data: object) -> object:
    # DRF's ListSerializer keeps min_length and max_length; its stubs do not say so.
    least, most = getattr(field, "min_length", None), getattr(field, "max_length", None)
    if type(data) is not list or field.child is None or field.validators != _bounds(field):
        return SLOW
    if not data and not field.allow_empty:
        return SLOW
    if (least is not None and len(data) < least) or (most is not None and len(data) > most):
        return SLOW
    items = []
    for item in data:
        value = quick(field.child, item)
        if value is SLOW:
            return SLOW
        items.append(value)
    return _hooks(field, items)


def _bounds(field: serializers.ListSerializer) -> list[Any]:
    """The validators a list may carry that only restate its own bounds (for the schema)."""
    bounds: dict[type, object] = {
        MinLengthValidator: getattr(field, "min_length", None),
        MaxLengthValidator: getattr(field, "max_length", None),
    }
    found: list[Any] = list(field.validators)
    return [v for v in found if bounds.get(type(v), empty) == getattr(v, "limit_value", SLOW)]


def _quick_mapping(serializer: serializers.Serializer, data: object) -> object:
    if type(data) is not dict or serializer.partial or serializer.validators:
        return SLOW
    attrs: dict[str, object] = {}
    for name, field in serializer._declared_fields.items():
        if field.read_only:
            continue
        if field.source not in (None, name) or field.default is not empty:
            return SLOW
        raw = data.get(name, empty)
        if raw is empty:
            if field.required:
                return SLOW
            continue
        value = quick(field, raw)
        if value is SLOW:
            return SLOW
        hook = getattr(serializer, f"validate_{name}", None)
        if hook is not None:
            value = _hooks(None, value, hook)
            if value is SLOW:
                return SLOW
        attrs[name] = value
    return _hooks(None, attrs, serializer.validate)


def _hooks(field: serializers.Field | None, value: object, hook=None) -> object:
    """Run a validation hook (or a list's ``validate``); an objection sends the value to DRF."""
    try:
        if hook is not None:
            return hook(value)
        if field is not None:
            return field.validate(value)  # type: ignore[attr-defined]
    except serializers.ValidationError:
        return SLOW
    return value


class QuickSerializer(serializers.Serializer):
    """A serializer that validates its common valid request with its fields' quick checks."""

    def is_valid(self, *, raise_exception: bool = False) -> bool:
        if not hasattr(self, "_validated_data") and hasattr(self, "initial_data"):
            value = _quick_mapping(self, self.initial_data)
            if value is not SLOW:
                self._validated_data = value
                self._errors: Any = {}
                return True
        return super().is_valid(raise_exception=raise_exception)
