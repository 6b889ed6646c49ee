"""Rolling rate limits shared by every replica, kept in PostgreSQL (TrafficJam's scheme).

A bucket holds how much capacity was ``used`` as of ``updated_at``; capacity replenishes
continuously at ``capacity / period`` per second, so after a burst a client gets one more request
every ``period / capacity`` seconds instead of waiting for a window to reset::

    remaining = min(capacity, capacity - used + capacity * (now - updated_at) / period)

A selection is limited per API key and per wallet; both buckets are checked and taken in one
statement on the database clock (``clients.sql.CONSUME``), so concurrent requests on any
replica (and replicas with skewed clocks) never overspend a bucket. A request refused by one
limit still counts against the other (it was attempted). A selection takes its units in the
statement that locks its tokens (``charging``: no round trip of its own), and locks nothing when
a bucket refuses; a multi-currency selection, whose legs share a transaction that a failing leg
rolls back, takes them first in a statement of their own. A busy bucket is split into shards,
each holding an equal share of the rate, and a request draws one shard at random: a hot
wallet's selections then update several rows instead of queueing on one.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connection, connections
from prometheus_client import Counter
from rest_framework.exceptions import Throttled

from clients import sql
from clients.permissions import api_key
from clients.rates import Rate, parse_rate
from common import db
from common.rules import is_identifier

# The few configured values, parsed once each (selection_buckets reads them at every request),
# cached by their text: a value set by hand in a settings module may be any type.
_parsed_text = functools.lru_cache(maxsize=64)(parse_rate)


def configured_rate(limits: dict, scope: str) -> Rate | None:
    """Return the limit of ``scope`` in ``limits`` (None: off), refusing one that does not parse.

    The environment's values are checked as the settings load and a hand-set mapping by the
    system checks (``clients.checks``); this names the setting if one gets through all the same.
    """
    value = limits.get(scope)
    try:
        return _parsed_text(str(value))
    except ValueError as exc:
        raise ImproperlyConfigured(f"SHERDLOCK_RATE_LIMITS[{scope!r}]: {exc}") from None


def configured_rates() -> dict[str, Rate]:
    """Return the enabled limits by scope (a bucket key starts with "<scope>:")."""
    limits = settings.SHERDLOCK_RATE_LIMITS
    rates = {scope: configured_rate(limits, scope) for scope in limits}
    return {scope: rate for scope, rate in rates.items() if rate is not None}


def prune_idle(limit: int, using: str = DEFAULT_DB_ALIAS) -> int:
    """Delete up to ``limit`` buckets that have been full for a while; return how many."""
    with connections[using].cursor() as cursor:
        cursor.execute(sql.PRUNE_IDLE, {"limit": limit})
        return cursor.rowcount


@dataclass(frozen=True)
class BucketState:
    """What a bucket allows now: ``remaining`` units of ``rate.count``, full in ``full_in`` s."""

    key: str
    rate: Rate
    remaining: float
    full_in: float
    updated_at: datetime | None  # the latest of its shards; None: no row, i.e. full

    @property
    def allowed_now(self) -> bool:
        return self.remaining >= 1


def bucket_states(keys: list[str]) -> dict[str, BucketState]:
    """Return the state of each bucket key of an enabled scope (all shards), from one query."""
    rates = configured_rates()
    wanted = {key: rates[key.partition(":")[0]] for key in keys if key.partition(":")[0] in rates}
    if not wanted:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(sql.READ_BUCKETS, [list(wanted)])
        rows = cursor.fetchall()
    states = {}
    for key, rate in wanted.items():
        shards = [row for row in rows if row[0] == key]
        # The same decay as CONSUME: each shard drains at its capacity / period per second.
        left = [
            (
                max(
                    float(used) - capacity * max((now - updated).total_seconds(), 0.0) / period, 0.0
                ),
                capacity,
                period,
            )
            for _, used, capacity, period, updated, now in shards
        ]
        states[key] = BucketState(
            key,
            rate,
            rate.count - sum(x for x, _, _ in left),
            max((x * period / capacity for x, capacity, period in left), default=0.0),
            max((row[4] for row in shards), default=None),
        )
    return states


# Every refusal is made as a RateLimited, on whichever path refused (the locking statement or a
# charge of its own): counted where it is made, once per refused request.
RATE_LIMIT_REFUSALS = Counter(
    "sherdlock_rate_limit_refusals_total",
    "Selections refused by a rate limit (429): per API key or per wallet (SHERDLOCK_RATE_*).",
)


class RateLimited(Throttled):
    """A selection a rate limit refused (429, ``Retry-After``); nothing was locked."""

    def __init__(self, wait: float | None = None, detail=None, code=None) -> None:
        super().__init__(wait, detail, code)
        RATE_LIMIT_REFUSALS.inc()


@dataclass(frozen=True)
class Meter:
    """The buckets one request takes a unit from: a shard of each, with its capacity."""

    keys: list[str]
    capacities: list[float]
    periods: list[float]

    def params(self) -> dict[str, list]:
        """Return the parameters of ``clients.sql.BUCKET_CTES``."""
        return {"keys": self.keys, "capacities": self.capacities, "periods": self.periods}


def meter_of(buckets: dict[str, Rate], rng: random.Random | None = None) -> Meter:
    """Draw a random shard of each bucket (a busy bucket is split, see ``Rate.shards``)."""
    draw = (rng or random).randrange
    keys, capacities, periods = [], [], []
    for name, rate in buckets.items():
        shards = rate.shards
        keys.append(f"{name}#{draw(shards)}" if shards > 1 else name)
        capacities.append(rate.count / shards)
        periods.append(rate.period)
    return Meter(keys, capacities, periods)


def refusal_wait(verdicts: Iterable[Sequence]) -> float | None:
    """Return the seconds until every refusing bucket has a unit again; None if none refused.

    ``verdicts`` are rows (key, allowed, capacity, period, used as found) of
    ``clients.sql.VERDICTS``.
    """
    wait = None
    for _key, ok, capacity, period, used in verdicts:
        if ok:
            continue
        if used is None:
            # Created by a concurrent request after this statement's snapshot: it is nearly
            # full, so one unit's worth of time is the honest estimate.
            needed = period / capacity
        else:
            needed = max(float(used) - (capacity - 1), 0.0) * period / capacity
        wait = max(wait or 0.0, needed)
    return wait


def consume(buckets: dict[str, Rate], rng: random.Random | None = None) -> tuple[bool, float]:
    """Take one unit from every bucket (a random shard of each); return (allowed, wait).

    ``wait`` is the seconds until every refusing bucket has a unit again.
    """
    wait = refusal_wait(_consume_meter(meter_of(buckets, rng)))
    return wait is None, wait or 0.0


# The meter of the request being served in this context, until a statement takes it.
_pending: ContextVar[Meter | None] = ContextVar("sherdlock_pending_meter", default=None)


def pending() -> Meter | None:
    """Return the meter the next locking statement is to take its units with, if any."""
    return _pending.get()


def take_pending() -> Meter | None:
    """Return the meter the next locking statement is to take its units with, once."""
    meter = _pending.get()
    if meter is not None:
        _pending.set(None)
    return meter


def charge_now() -> None:
    """Take the pending meter's units now, in a statement of their own (a request about to
    wait for held funds is refused before it waits); raise ``RateLimited`` if refused."""
    meter = take_pending()
    if meter is not None and (wait := refusal_wait(_consume_meter(meter))) is not None:
        raise RateLimited(wait)


@contextmanager
def charging(buckets: dict[str, Rate]) -> Iterator[None]:
    """Charge the request served in the block to ``buckets``, in its first locking statement.

    That statement takes the units and locks nothing if a bucket refuses; the store then raises
    ``RateLimited``. A block that ends without running one (a selection refused before it
    locked, say) is charged on the way out, and a refusal then replaces its error.
    """
    if not buckets:
        yield
        return
    token = _pending.set(meter_of(buckets))
    try:
        yield
    except Exception:
        charge_now()  # if no statement took the units, a refusal replaces the error
        raise
    else:
        if (left := take_pending()) is not None:
            _consume_meter(left)
    finally:
        _pending.reset(token)


def _consume_meter(meter: Meter) -> list[tuple]:
    cursor = db.execute(sql.CONSUME[connection.in_atomic_block], meter.params())
    return cursor.fetchall()


def selection_buckets(request) -> dict[str, Rate]:
    """Return the buckets a selection request draws from, by name (``SHERDLOCK_RATE_LIMITS``).

    Per API key, and per wallet when the request names one the key may use: a wallet outside
    the key's scope is refused (403) and must not drain another client's bucket.
    """
    limits = settings.SHERDLOCK_RATE_LIMITS
    key = api_key(request)
    if key is None:
        return {}
    out = {}
    if rate := configured_rate(limits, "selections_per_key"):
        out[f"selections_per_key:{key.prefix}"] = rate
    data = request.data
    wallet = data.get("wallet") if isinstance(data, dict) else None
    if (
        (rate := configured_rate(limits, "selections_per_wallet"))
        and is_identifier(wallet)
        and key.may_use(wallet)
    ):
        out[f"selections_per_wallet:{wallet}"] = rate
    return out
