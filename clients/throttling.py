"""Rolling rate limits shared by every replica, kept in PostgreSQL (TrafficJam's scheme).

A bucket holds how much capacity was ``used`` as of ``updated_at``; capacity replenishes
continuously at ``max / period`` per second, so after a burst a client gets one more request
every ``period / max`` seconds instead of waiting for a window to reset::

    remaining = min(max, max - used + max * (now - updated_at) / period)

Check and increment are one statement on the database clock, so concurrent requests on any
replica (and replicas with skewed clocks) never overspend a bucket.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import connection
from rest_framework.throttling import BaseThrottle

from clients.permissions import api_key
from tokens.serializers import is_identifier

_RATE = re.compile(r"(?P<count>[0-9]+)\s*/\s*(?P<period>[0-9]*\.?[0-9]+)?\s*(?P<unit>[smhd]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}

# Decay what was used since the last update, then take one unit if a whole one is left. The
# WHERE clause of DO UPDATE makes a refusal leave the row untouched, and the refusal branch
# reads the bucket as the statement found it to compute how long until a unit is back.
CONSUME = """
WITH taken AS (
    INSERT INTO clients_ratebucket AS b (key, used, updated_at)
    VALUES (%(key)s, 1, statement_timestamp())
    ON CONFLICT (key) DO UPDATE
        SET used = GREATEST(0, b.used - %(max)s * EXTRACT(EPOCH FROM statement_timestamp()
                                                          - b.updated_at) / %(period)s) + 1,
            updated_at = statement_timestamp()
        WHERE GREATEST(0, b.used - %(max)s * EXTRACT(EPOCH FROM statement_timestamp()
                                                     - b.updated_at) / %(period)s) + 1
              <= %(max)s
    RETURNING b.used
)
SELECT true, used FROM taken
UNION ALL
SELECT false, GREATEST(0, used - %(max)s * EXTRACT(EPOCH FROM statement_timestamp()
                                                   - updated_at) / %(period)s)
FROM clients_ratebucket
WHERE key = %(key)s AND NOT EXISTS (SELECT 1 FROM taken)
"""


# Delete up to %(limit)s buckets untouched for at least %(idle)s seconds, the longest period
# of any configured limit. Such a bucket has replenished completely (``remaining`` reached
# ``max`` after one period, whatever ``used`` was), so it means exactly what no row means: the
# next CONSUME inserts a fresh row with one unit used. Deleting it loses nothing and keeps the
# table at one row per recently active key and wallet instead of one per key and wallet ever
# seen. There is no index on updated_at (one would slow every CONSUME), so a batch reads the
# table until it has found its rows. SKIP LOCKED passes over buckets being consumed right now,
# and the repeated predicate keeps a bucket touched after it was picked.
PRUNE_IDLE = """
DELETE FROM clients_ratebucket
WHERE key IN (
    SELECT key FROM clients_ratebucket
    WHERE updated_at <= statement_timestamp() - %(idle)s * interval '1 second'
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
AND updated_at <= statement_timestamp() - %(idle)s * interval '1 second'
"""

# The buckets asked for and the database clock, which stamped them.
READ_BUCKETS = """
SELECT key, used, updated_at, statement_timestamp() FROM clients_ratebucket WHERE key = ANY(%s)
"""


@dataclass(frozen=True)
class Rate:
    """At most ``count`` requests per ``period`` seconds, replenishing continuously."""

    count: int
    period: float


def parse_rate(value: object) -> Rate | None:
    """Parse "N/P" with an optional unit (s, m, h, d) after P, e.g. "600/60s"; None disables."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if text in {"", "0", "none", "off"}:
        return None
    match = _RATE.fullmatch(text)
    if not match:
        raise ValueError(f"rate limit {value!r} is not of the form 'N/Ps', e.g. '600/60s'")
    count = int(match["count"])
    period = float(match["period"] or 1) * _UNIT_SECONDS[match["unit"]]
    if count == 0:
        return None
    if period <= 0:
        raise ValueError(f"rate limit {value!r} needs a positive period")
    return Rate(count, period)


def configured_rates() -> dict[str, Rate]:
    """Return the enabled limits by scope (a bucket key starts with "<scope>:")."""
    rates = {scope: parse_rate(value) for scope, value in settings.SHERDLOCK_RATE_LIMITS.items()}
    return {scope: rate for scope, rate in rates.items() if rate is not None}


def idle_after() -> float | None:
    """Return the seconds after which an untouched bucket is full: the longest period.

    None when no limit is enabled: then no bucket is read or written, and whatever rows an
    earlier configuration left are kept in case it comes back.
    """
    return max((rate.period for rate in configured_rates().values()), default=None)


def prune_idle(limit: int, using: str = "default") -> int:
    """Delete up to ``limit`` buckets that have been full for a while; return how many."""
    from django.db import connections

    idle = idle_after()
    if idle is None:
        return 0
    with connections[using].cursor() as cursor:
        cursor.execute(PRUNE_IDLE, {"idle": idle, "limit": limit})
        return cursor.rowcount


@dataclass(frozen=True)
class BucketState:
    """What a bucket allows now: ``remaining`` units of ``rate.count``, full in ``full_in`` s."""

    key: str
    rate: Rate
    remaining: float
    full_in: float
    updated_at: datetime | None  # None: no row, i.e. full

    @property
    def allowed_now(self) -> bool:
        return self.remaining >= 1


def bucket_states(keys: list[str]) -> dict[str, BucketState]:
    """Return the state of each bucket key of an enabled scope, from one query."""
    rates = configured_rates()
    wanted = {key: rates[key.partition(":")[0]] for key in keys
              if key.partition(":")[0] in rates}
    if not wanted:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(READ_BUCKETS, [list(wanted)])
        rows = {key: (used, updated_at, now) for key, used, updated_at, now in cursor.fetchall()}
    states = {}
    for key, rate in wanted.items():
        if key not in rows:
            states[key] = BucketState(key, rate, float(rate.count), 0.0, None)
            continue
        used, updated_at, now = rows[key]
        # The same decay as CONSUME: used drains at count / period units per second.
        elapsed = max((now - updated_at).total_seconds(), 0.0)
        left = max(float(used) - rate.count * elapsed / rate.period, 0.0)
        states[key] = BucketState(key, rate, rate.count - left, left * rate.period / rate.count,
                                  updated_at)
    return states


def consume(key: str, rate: Rate) -> tuple[bool, float]:
    """Take one unit from bucket ``key``; return (allowed, seconds until a unit is back)."""
    with connection.cursor() as cursor:
        cursor.execute(CONSUME, {"key": key, "max": rate.count, "period": rate.period})
        row = cursor.fetchone()
    if row is None:
        # The bucket was created by a concurrent request after this statement's snapshot:
        # it is nearly full, so one unit's worth of time is the honest estimate.
        return False, rate.period / rate.count
    allowed, used = row
    if allowed:
        return True, 0.0
    deficit = float(used) - (rate.count - 1)
    return False, max(deficit, 0.0) * rate.period / rate.count


class RollingRateThrottle(BaseThrottle):
    """Refuse a request when its bucket has no whole unit left; subclasses name the bucket."""

    scope = ""

    def __init__(self) -> None:
        self._wait: float | None = None

    def bucket(self, request, view) -> str | None:
        """Return the bucket key for this request, or None to let it through uncounted."""
        raise NotImplementedError

    def allow_request(self, request, view) -> bool:
        rate = parse_rate(settings.SHERDLOCK_RATE_LIMITS.get(self.scope))
        if rate is None:
            return True
        key = self.bucket(request, view)
        if key is None:
            return True
        allowed, wait = consume(f"{self.scope}:{key}", rate)
        self._wait = None if allowed else wait
        return allowed

    def wait(self) -> float | None:
        """Return whole seconds until one unit has replenished (at least 1)."""
        if self._wait is None:
            return None
        return float(max(1, math.ceil(self._wait)))


class SelectionsPerKeyThrottle(RollingRateThrottle):
    """Limit selections per API key."""

    scope = "selections_per_key"

    def bucket(self, request, view) -> str | None:
        key = api_key(request)
        return key.prefix if key is not None else None


class SelectionsPerWalletThrottle(RollingRateThrottle):
    """Limit selections per wallet, whichever keys (or replicas) they come through."""

    scope = "selections_per_wallet"

    def bucket(self, request, view) -> str | None:
        key = api_key(request)
        data = request.data
        wallet = data.get("wallet") if isinstance(data, dict) else None
        # Malformed wallets are refused by the serializer; wallets outside the key's scope are
        # refused by the view and must not drain another client's bucket.
        if key is None or not is_identifier(wallet) or not key.may_use(wallet):
            return None
        return wallet
