"""The service's knobs (``settings.SHERDLOCK``) as one typed, checked, frozen object.

Every knob is declared once, below, with its default; README's "Configuration" says what each
trades. ``config.settings`` reads them from the environment (``SHERDLOCK_<NAME>``) with
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
    """The selector's, the lease's, the web process's and housekeeping's knobs."""

    # Refetches without progress in one round before it gives up with "funds locked".
    max_retries: int = 5
    # Rows per candidate fetch once this replica's cache of the wallet is warm, and before.
    fetch_limit: int = 64
    cold_fetch_limit: int = 16
    # ... and once this replica has locked many of its queued tokens in a row, unrefused.
    calm_fetch_limit: int = 256
    # Lease grants and releases commit asynchronously unless this is on (spends always commit
    # synchronously): a database crash may then forget the last moments of grants, which their
    # holders see as lease_lost. See common.sql.ASYNC_COMMIT.
    durable_leases: bool = False
    # Hot statements are prepared on the server after this many runs on a connection (0: at
    # their first); None never (config.settings forces it behind a transaction-pooling proxy,
    # which cannot keep prepared statements). Each run before it is planned afresh: the hot
    # statements are a fixed set, each run many times, so they are prepared at once.
    prepare_threshold: int | None = 0
    # Seconds a cached candidate list is used.
    cache_ttl: float = 1.0
    # Real-time caches: one LISTEN connection per replica process applies token and lock
    # changes to its cache (locks.listener). While it is connected the cache keeps queues for
    # cache_ttl_listening; while it is not, or with listen off, for cache_ttl.
    listen: bool = False
    cache_ttl_listening: float = 30.0
    # Extra rounds after a "funds locked" round, each after a uniform random sleep.
    backoff_attempts: int = 3
    backoff_min: float = 0.005
    backoff_max: float = 0.05
    # Seconds a selection waits for held funds before it takes its wallet's turn, so that what
    # comes free goes to it before newer selections (sherdlock.turns); 0 never takes one.
    turn_after: float = 0.02
    # Lock lifetime (database clock), and how long after a selection its locks may be renewed.
    lease_seconds: float = 60.0
    max_lease_seconds: float = 600.0
    # Requests one web process lets wait for held funds at once (Prefer: wait); a web worker
    # never lets more than its threads (WEB_THREADS) less 8 wait, so that spends and releases
    # always find one (locks.wait_slots.wait_slots).
    wait_slots: int = 120
    # How long a process trusts an API key it read (revocation takes effect within this).
    api_key_cache_seconds: float = 5.0
    # Seconds a statement of a web process may run before PostgreSQL cancels it (503
    # database_busy); 0 never. A backstop for what the selection bounds do not cover: a statement
    # holds one of the process's pooled connections, which every other request needs too. Far
    # above any statement of a request or an admin page at the benchmark's sizes, so that it
    # cuts only the runaway ones.
    statement_timeout: float = 10.0
    # Housekeeping (locks.housekeeping): rows per statement, statements per kind in one pass,
    # how long expired and spent locks are kept, days of run and failed-selection history.
    housekeeping_batch_size: int = 1000
    housekeeping_max_batches: int = 100
    housekeeping_grace_seconds: float = 5.0
    housekeeping_history_days: float = 7.0
    # Whole seconds: beat's IntervalSchedule counts in integers.
    housekeeping_interval_seconds: int = 10
    # Share of its wall time a housekeeper spends in statements while a backlog lasts: after a
    # full batch it sleeps (1 / duty - 1) times as long as the batch took, so clearing a large
    # backlog leaves the CPU, WAL and I/O it would take to the selections (1 never sleeps).
    # Expired locks never stand in a selection's way (a lock whose lease ran out is taken
    # over), so a backlog can wait: a twentieth keeps selections at their pace and their p99
    # while it goes (README, "Housekeeping and leases").
    housekeeping_duty_cycle: float = 0.05
    # Hash partitions by wallet of the token, lock and selection tables: 1 leaves them
    # unpartitioned (their keys carry the wallet all the same). Read by the migration that
    # creates them, so fixed at migrate time (README, "Partitioning by wallet").
    partitions: int = 1

    def __post_init__(self) -> None:
        checks: list[tuple[str, bool, str]] = [
            ("max_retries", self.max_retries >= 0, "must not be negative"),
            ("fetch_limit", self.fetch_limit >= 1, "must be at least 1"),
            ("cold_fetch_limit", self.cold_fetch_limit >= 1, "must be at least 1"),
            ("calm_fetch_limit", self.calm_fetch_limit >= 1, "must be at least 1"),
            (
                "prepare_threshold",
                self.prepare_threshold is None or self.prepare_threshold >= 0,
                "must not be negative ('off' never prepares)",
            ),
            ("cache_ttl", self.cache_ttl > 0, "must be positive"),
            ("cache_ttl_listening", self.cache_ttl_listening > 0, "must be positive"),
            ("backoff_attempts", self.backoff_attempts >= 0, "must not be negative"),
            ("backoff_min", self.backoff_min >= 0, "must not be negative"),
            (
                "backoff_max",
                self.backoff_max >= self.backoff_min,
                f"must be at least BACKOFF_MIN ({self.backoff_min})",
            ),
            ("turn_after", self.turn_after >= 0, "must not be negative (0: never)"),
            ("lease_seconds", self.lease_seconds > 0, "must be positive"),
            (
                "max_lease_seconds",
                self.max_lease_seconds >= self.lease_seconds,
                f"must be at least LEASE_SECONDS ({self.lease_seconds})",
            ),
            ("wait_slots", self.wait_slots >= 0, "must not be negative"),
            ("api_key_cache_seconds", self.api_key_cache_seconds >= 0, "must not be negative"),
            ("statement_timeout", self.statement_timeout >= 0, "must not be negative (0: never)"),
            ("housekeeping_batch_size", self.housekeeping_batch_size >= 1, "must be at least 1"),
            ("housekeeping_max_batches", self.housekeeping_max_batches >= 1, "must be at least 1"),
            (
                "housekeeping_grace_seconds",
                self.housekeeping_grace_seconds >= 0,
                "must not be negative",
            ),
            (
                "housekeeping_history_days",
                self.housekeeping_history_days >= 0,
                "must not be negative",
            ),
            (
                "housekeeping_interval_seconds",
                self.housekeeping_interval_seconds >= 1,
                "must be at least 1",
            ),
            (
                "housekeeping_duty_cycle",
                0 < self.housekeeping_duty_cycle <= 1,
                "must be above 0 and at most 1",
            ),
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
