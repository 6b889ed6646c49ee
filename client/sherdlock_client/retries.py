"""When a call is sent again, and after how long: the protocol's rules, without I/O.

429 and 503 are retried after their ``Retry-After``; a server that cannot be reached (nothing
was sent) after a short backoff; an answer lost after the request was sent only for the calls
a transaction id makes idempotent; ``funds_locked`` only when the caller asks for it. Each
pause gets random jitter, so that clients refused together do not all come back at once,
and no retry starts after the call's deadline.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

from .errors import AnswerLost, ClientError, FundsLocked, Unreachable

log = logging.getLogger("sherdlock_client")

# Without a Retry-After header, a 429 or 503 is retried after this long: the server's own
# hints are whole seconds.
DEFAULT_RETRY_AFTER = 1.0
# The first pause after a lost connection, doubled on each further one up to the cap: the
# usual loss is a kept-alive connection the server closed, retried at once on a new one.
FIRST_BACKOFF = 0.05
MAX_BACKOFF = 2.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard a client retries.

    ``retry_for``: seconds after a call starts in which retries may begin (a call may pass
    its own); ``attempts``: the most sends of one call; ``jitter``: each pause is stretched by
    up to this fraction, at random.
    """

    retry_for: float = 10.0
    attempts: int = 6
    jitter: float = 0.25

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be positive, got {self.attempts!r}")
        if self.retry_for < 0 or self.jitter < 0:
            raise ValueError("retry_for and jitter are not negative")


NO_RETRIES = RetryPolicy(retry_for=0.0, attempts=1)


@dataclass(frozen=True, slots=True)
class Retry:
    """A retry about to happen: what failed, which retry this is, and the pause before it."""

    method: str
    target: str
    reason: str  # the failure's code: rate_limited, database_unavailable, answer_lost, ...
    number: int  # 1 for the first retry of the call
    delay: float  # seconds before it is sent
    error: ClientError


RetryHook = Callable[[Retry], None]


class Attempts:
    """The retries of one call: ``after`` says how long to pause, or raises the failure."""

    __slots__ = (
        "_deadline",
        "_hook",
        "_idempotent",
        "_locked_deadline",
        "_method",
        "_policy",
        "_rng",
        "_target",
        "sent",
    )

    def __init__(
        self,
        policy: RetryPolicy,
        method: str,
        target: str,
        *,
        idempotent: bool,
        now: float,
        retry_for: float | None = None,
        retry_locked_for: float = 0.0,
        hook: RetryHook | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._policy = policy
        self._method, self._target = method, target
        self._idempotent = idempotent
        self._deadline = now + (policy.retry_for if retry_for is None else retry_for)
        self._locked_deadline = now + retry_locked_for
        self._hook = hook
        self._rng = rng or random
        self.sent = 1

    def after(self, error: ClientError, now: float) -> float:
        """Return the pause before retrying after ``error``; raise it when not retrying."""
        pause = self._pause(error)
        deadline = self._locked_deadline if isinstance(error, FundsLocked) else self._deadline
        if pause is None or self.sent >= self._policy.attempts or now + pause > deadline:
            raise error
        retry = Retry(self._method, self._target, error.code, self.sent, pause, error)
        self.sent += 1
        log.info(
            "retry %d of %s %s in %.3fs after %s",
            retry.number,
            self._method,
            self._target,
            pause,
            error,
        )
        if self._hook is not None:
            self._hook(retry)
        return pause

    def _pause(self, error: ClientError) -> float | None:
        stretch = 1.0 + self._rng.random() * self._policy.jitter
        if isinstance(error, FundsLocked):
            # The body's hint is as precise as the holds last; half either side spreads the
            # callers of a contended wallet over the moment the funds come free.
            locked = DEFAULT_RETRY_AFTER if error.retry_after is None else error.retry_after
            return locked * self._rng.uniform(0.5, 1.5)
        status = getattr(error, "status", None)
        if status in (429, 503):
            hint: float | None = getattr(error, "retry_after", None)
            return (DEFAULT_RETRY_AFTER if hint is None else hint) * stretch
        if isinstance(error, Unreachable) or (isinstance(error, AnswerLost) and self._idempotent):
            backoff = 0.0 if self.sent == 1 else FIRST_BACKOFF * 2 ** (self.sent - 2)
            return min(backoff, MAX_BACKOFF) * stretch
        return None
