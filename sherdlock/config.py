"""The selector's tuning, and its backoff between rounds.

The values are constants, not settings: each trades contention handling against latency in a
way an operator has no reason to change, and each is the default of ``SelectorConfig`` (the
only place it is written). A caller of the library may still pass its own ``SelectorConfig``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

# Refetches without progress in one round before it gives up with FundsLocked. A competitor
# commits or releases within a few refetches (each waits up to REFETCH_DELAY); more would only
# make a wallet whose funds stay held answer later.
MAX_RETRIES = 5
# Rows per fetch of a wallet this replica selects from often (sherdlock.demand): the rows not
# needed wait in the cache for the next selections, saving queries; many more go stale before
# they are used.
FETCH_LIMIT = 64
# Rows per fetch of any other wallet: its leftovers would most likely expire unused, so the fetch
# reads little more than one selection needs, and keeps none.
COLD_FETCH_LIMIT = 16
# A contested wallet's fetch queues nothing of what it reads (sherdlock.cache), so it reads the
# tokens its need takes at the wallet's mean token (as its latest random batch held them), this
# many times over: such a batch falls short only on a run of small tokens, and the replicas that
# read it each cover their need with a different few of its tokens (their own shuffle of it).
# Never fewer rows than a cold fetch, nor more than a warm one (sherdlock.demand).
BATCH_MARGIN = 2
# Rows per fetch of a wallet whose queued tokens this replica keeps locking unrefused: nobody else
# takes them, so a long queue stays fresh and a replica alone on a hot wallet rarely fetches.
CALM_FETCH_LIMIT = 256
# Jittered sleep before a refetch without progress: time for the competitor to commit or release
# instead of hammering the store.
REFETCH_DELAY = (0.001, 0.010)
# Seconds a cached candidate list is used. Stale lists cost failed lock attempts, never
# correctness; a shorter life costs fetches.
CACHE_TTL = 1.0
# The same while a listener keeps the cache current (locks.listener): a queue then goes stale
# only through a race or an unannounced expiry, either of which costs one failed attempt.
CACHE_TTL_LISTENING = 30.0
# Wallet/currency queues a replica keeps before evicting the least recently used: bounds memory.
CACHE_MAX_WALLETS = 10_000
# Rounds after a FundsLocked round, each after a uniform random sleep of BACKOFF_MIN to
# BACKOFF_MAX seconds: two replicas that each hold part of what both need release it and sleep
# apart, and the one that wakes first takes all. Three rounds of up to 50 ms break such ties
# while a wallet whose funds stay held still answers within a fraction of a second.
BACKOFF_ATTEMPTS = 3
BACKOFF_MIN = 0.005
BACKOFF_MAX = 0.050
# Seconds a selection waits for held funds before it takes its key's turn (sherdlock.turns), so
# that what comes free goes to the selections that waited rather than to the newest. The turn is
# for the unlucky: twice the longest backoff sleep, a wait that ordinary contention does not
# reach. Every selection of a busy wallet waits some milliseconds, more on a loaded host, and a
# turn taken then makes the wallet's newcomers wait behind it, one holder at a time: the wallet
# would serve its selections in turn where they could have run side by side.
TURN_AFTER = 2 * BACKOFF_MAX
# How often the turn's holder refetches, and the longest a selection waits at a time for a turn.
TURN_POLL = 0.001
YIELD_LIMIT = 0.2


def _check_seconds(name: str, value: float) -> None:
    """Reject seconds that are negative or not finite."""
    if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite non-negative seconds, got {value!r}")


def _check_delay_range(name: str, low: float, high: float) -> None:
    """Reject a delay range that is negative, not finite or upside down."""
    for value in (low, high):
        _check_seconds(name, value)
    if low > high:
        raise ValueError(f"{name}: minimum {low} exceeds maximum {high}")


@dataclass(frozen=True)
class BackoffPolicy:
    """Decide how often and how long to back off after a round lost to contention.

    attempts: rounds run after the first one ended with FundsLocked. Each is preceded by a
        jittered sleep and starts from scratch with no locks held. More attempts resolve
        more contention at the price of a slower failure when funds stay locked (e.g. by a
        crashed replica whose leases have not expired yet).
    min_delay, max_delay: bounds in seconds of the uniform jitter. Two replicas that each
        hold part of what both need release everything and sleep for different random
        times; the one that wakes first takes all tokens. A wider range makes a repeat tie
        less likely but adds latency to every contended request.
    """

    attempts: int = BACKOFF_ATTEMPTS
    min_delay: float = BACKOFF_MIN
    max_delay: float = BACKOFF_MAX

    def __post_init__(self) -> None:
        if type(self.attempts) is not int or self.attempts < 0:
            raise ValueError(f"attempts must be a non-negative int, got {self.attempts!r}")
        _check_delay_range("backoff delay", self.min_delay, self.max_delay)

    def delay(self, rng: random.Random) -> float:
        """Draw a jittered delay in [min_delay, max_delay]."""
        return rng.uniform(self.min_delay, self.max_delay)


@dataclass(frozen=True)
class SelectorConfig:
    """Configure the selector; every knob trades contention handling against latency.

    max_retries: refetches allowed in one round without progress (no new token locked
        since the previous fetch) before the round gives up with FundsLocked. Fetches that
        lock something reset the count, so large selections spanning many fetches are not
        cut short. Higher values wait longer for a competitor to finish or release.
    fetch_limit: rows read per fetch for a wallet/currency this replica selects from at a pace
        its queue serves (warm: its latest selection less than `cache_ttl` * cold_fetch_limit
        / fetch_limit ago, see sherdlock.demand). Rows not needed are cached for later
        selections on this replica, saving queries; too many make cached lists go stale (more
        conflicts) and make each fetch heavier.
    cold_fetch_limit: rows read per fetch for any other wallet/currency. Its leftovers would
        most likely expire unused, so the fetch reads little more than a selection needs and
        none are cached.
    calm_fetch_limit: rows read per fetch for a warm wallet/currency whose queued tokens
        this replica has locked many times in a row without a refusal (``TokenCache.calm``):
        no other replica is taking its tokens, so a longer queue does not go stale and saves
        fetches. The first refusal or lost fetch row brings it back to `fetch_limit`.
    refetch_delay: (min, max) seconds of jittered sleep before a refetch without progress,
        giving the competitor time to commit or release instead of hammering the store.
    cache_ttl: seconds a cached candidate list stays usable, and how long this replica
        remembers holding a token locally. Stale lists cost failed lock attempts, never
        correctness; a short ttl means more fetches.
    cache_max_wallets: wallet/currency queues kept before evicting the least recently used.
        Bounds memory on replicas serving many wallets.
    backoff: rounds after a FundsLocked round; what breaks the livelock of two replicas
        each holding part of what both need.
    turn_after: seconds a selection waits for held funds before it queues for its key's turn
        (sherdlock.turns): while it holds it, newcomers to the key wait, so what comes free
        goes to the selections that waited. 0 never queues (and nobody waits).
    turn_poll: seconds between the refetches of the turn's holder.
    yield_limit: longest a selection waits at a time for a turn, its own or another's to end.
    """

    max_retries: int = MAX_RETRIES
    fetch_limit: int = FETCH_LIMIT
    cold_fetch_limit: int = COLD_FETCH_LIMIT
    calm_fetch_limit: int = CALM_FETCH_LIMIT
    refetch_delay: tuple[float, float] = REFETCH_DELAY
    cache_ttl: float = CACHE_TTL
    cache_max_wallets: int = CACHE_MAX_WALLETS
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    turn_after: float = TURN_AFTER
    turn_poll: float = TURN_POLL
    yield_limit: float = YIELD_LIMIT

    def __post_init__(self) -> None:
        if type(self.max_retries) is not int or self.max_retries < 0:
            raise ValueError(f"max_retries must be a non-negative int, got {self.max_retries!r}")
        for name in ("fetch_limit", "cold_fetch_limit", "calm_fetch_limit"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(self.refetch_delay, tuple) or len(self.refetch_delay) != 2:
            raise ValueError(
                f"refetch_delay must be a (min, max) tuple, got {self.refetch_delay!r}"
            )
        _check_delay_range("refetch_delay", *self.refetch_delay)
        ttl = self.cache_ttl
        if not isinstance(ttl, int | float) or not math.isfinite(ttl) or ttl <= 0:
            raise ValueError(f"cache_ttl must be positive finite seconds, got {ttl!r}")
        if type(self.cache_max_wallets) is not int or self.cache_max_wallets < 1:
            raise ValueError(
                f"cache_max_wallets must be a positive int, got {self.cache_max_wallets!r}"
            )
        for name in ("turn_after", "turn_poll", "yield_limit"):
            _check_seconds(name, getattr(self, name))
        if not isinstance(self.backoff, BackoffPolicy):
            raise ValueError(f"backoff must be a BackoffPolicy, got {self.backoff!r}")

    @property
    def retry_after(self) -> float:
        """Return the seconds a caller should wait before retrying after FundsLocked.

        That is twice the longest a competitor needs for one full round (all refetch
        delays) plus one backoff sleep: by then it has either finished or released.
        """
        round_time = self.max_retries * self.refetch_delay[1] + self.backoff.max_delay
        return max(2 * round_time, 0.001)
