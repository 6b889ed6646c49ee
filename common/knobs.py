"""The service's knobs (``settings.SHERDLOCK``) as one typed, checked, frozen object.

Every knob is declared once, below, with its default; docs/configuration.md says what each
does. ``config.settings`` reads them from the environment (``SHERDLOCK_<NAME>``) with
``Knobs.from_environ`` and keeps them as the mapping ``settings.SHERDLOCK``, so a bad value
stops the process at start-up with a message naming the variable.

Code reads them through ``knobs()``, never from ``settings.SHERDLOCK`` itself: it builds the
object from the mapping (defaults for what the mapping leaves out, types, checks) once per
mapping object, so a test that replaces the mapping (``settings.SHERDLOCK = {**settings.SHERDLOCK,
"LISTEN": True}``, ``override_settings(SHERDLOCK=...)``) is seen at the next call. Replace the
mapping, never change it in place. A ``Knobs`` (``dataclasses.replace(knobs(), ...)``) may stand
in for the mapping too.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured

PREFIX = "SHERDLOCK_"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_NEVER = {"off", "none", ""}


@dataclass(frozen=True)
class Knobs:
    """The settings of the selector, its leases and its tables that an operator may change.

    Tuning (fetch sizes, cache lifetimes, backoff, housekeeping's pace) is not here: each value
    is a named constant beside the code it tunes (``sherdlock.config``, ``locks.housekeeping``,
    ``locks.wait_slots``, ``clients.authentication``), with the reason for its value.
    """

    # Lease grants and releases commit asynchronously unless this is on (spends always commit
    # synchronously): a database crash, or a failover to an asynchronous standby, may then
    # forget the last moments of grants, which their holders see as lease_lost. See
    # common.sql.ASYNC_COMMIT.
    durable_leases: bool = False
    # Hot statements are prepared on the server after this many runs on a connection (0: at
    # their first); None never. Not read from the environment: config.settings sets it from
    # DATABASE_POOLING (a transaction-pooling proxy cannot keep prepared statements).
    prepare_threshold: int | None = 0
    # Real-time caches: one LISTEN connection per replica process applies token and lock
    # changes to its cache (locks.listener).
    listen: bool = False
    # Lock lifetime (database clock), and how long after a selection its locks may be renewed.
    lease_seconds: float = 60.0
    max_lease_seconds: float = 600.0
    # Seconds a statement of a web process may run before PostgreSQL cancels it (503
    # database_busy); 0 never. A backstop for what the selection bounds do not cover: a statement
    # holds one of the process's pooled connections, which every other request needs too.
    statement_timeout: float = 10.0
    # Hash partitions by wallet of the token, lock and selection tables: 1 leaves them
    # unpartitioned (their keys carry the wallet all the same). Read by the migration that
    # creates them, so fixed at migrate time (docs/scaling.md).
    partitions: int = 1

    def __post_init__(self) -> None:
        checks: list[tuple[str, bool, str]] = [
            (
                "prepare_threshold",
                self.prepare_threshold is None or self.prepare_threshold >= 0,
                "must not be negative (None never prepares)",
            ),
            ("lease_seconds", self.lease_seconds > 0, "must be positive"),
            (
                "max_lease_seconds",
                self.max_lease_seconds >= self.lease_seconds,
                f"must be at least LEASE_SECONDS ({self.lease_seconds})",
            ),
            ("statement_timeout", self.statement_timeout >= 0, "must not be negative (0: never)"),
            ("partitions", 1 <= self.partitions <= 256, "must be between 1 and 256"),
        ]
        for name, ok, rule in checks:
            if not ok:
                value = getattr(self, name)
                raise ImproperlyConfigured(
                    f"knob {name.upper()}={value!r} ({PREFIX}{name.upper()}): {rule}"
                )

    @classmethod
    def from_mapping(cls, values: Mapping[str, object] | Knobs) -> Knobs:
        """Build the knobs from ``settings.SHERDLOCK``; unnamed knobs keep their defaults."""
        if isinstance(values, Knobs):
            return values
        fields = {field.name.upper(): field for field in dataclasses.fields(cls)}
        if unknown := sorted(set(values) - set(fields)):
            raise ImproperlyConfigured(
                f"SHERDLOCK names unknown knob(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(fields))}"
            )
        return cls(
            **{
                fields[name].name: _convert(fields[name], value, f"SHERDLOCK[{name!r}]")
                for name, value in values.items()
            }
        )

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], **given: Any) -> Knobs:
        """Read each knob from ``SHERDLOCK_<NAME>`` in ``environ``; ``given`` ones are not read."""
        values = dict(given)
        for field in dataclasses.fields(cls):
            variable = PREFIX + field.name.upper()
            if field.name in NOT_FROM_ENVIRONMENT:
                continue
            if field.name not in values and variable in environ:
                values[field.name] = _convert(field, environ[variable], variable)
        return cls(**values)

    def setting(self) -> dict[str, Any]:
        """Return the knobs as ``settings.SHERDLOCK`` holds them (upper-case names)."""
        return {name.upper(): value for name, value in dataclasses.asdict(self).items()}


def _convert(field: dataclasses.Field[Any], value: object, source: str) -> Any:
    """Turn ``value`` (a string from the environment, or a Python value) into the field's type."""
    # Annotations are strings here (``from __future__ import annotations``): "int", "int | None".
    convert = _CONVERTERS[str(field.type)]
    try:
        return convert(value)
    except (TypeError, ValueError) as exc:
        raise ImproperlyConfigured(f"{source}={value!r}: {exc}") from None


def _to_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"use one of {', '.join(sorted(_TRUE))} or {', '.join(sorted(_FALSE - {''}))}")


def _to_int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError("must be a whole number")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("must be a whole number")
        return int(value)
    try:
        return int(value)
    except ValueError:
        raise ValueError("must be a whole number") from None


def _to_float(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError("must be a number")
    try:
        number = float(value)
    except ValueError:
        raise ValueError("must be a number") from None
    if not math.isfinite(number):
        raise ValueError("must be a finite number")
    return number


def _to_threshold(value: object) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in _NEVER):
        return None
    return _to_int(value)


_CONVERTERS: dict[str, Callable[[object], Any]] = {
    "bool": _to_bool,
    "int": _to_int,
    "float": _to_float,
    "int | None": _to_threshold,
}

# Knobs the settings derive from other settings rather than read from a variable of their own.
NOT_FROM_ENVIRONMENT = frozenset({"prepare_threshold"})


def environment_variables() -> list[str]:
    """Return the ``SHERDLOCK_*`` variables the knobs are read from."""
    return [
        PREFIX + field.name.upper()
        for field in dataclasses.fields(Knobs)
        if field.name not in NOT_FROM_ENVIRONMENT
    ]


_cached: tuple[object, Knobs] | None = None


def knobs() -> Knobs:
    """Return the knobs of ``settings.SHERDLOCK``, built once per mapping object."""
    global _cached
    from django.conf import settings

    values = settings.SHERDLOCK
    cached = _cached
    if cached is None or cached[0] is not values:
        cached = (values, Knobs.from_mapping(values))
        _cached = cached
    return cached[1]
