"""A request's wait for held funds: try, queue behind the others, try again as the queue's head.

``wait_for`` wraps an impatient attempt (one that raises ``sherdlock.FundsLocked`` at once
while others hold the funds) in the process's queues (``locks.waiting``): a newcomer tries at
once only if nobody waits for its key yet, then sleeps in the key's queue and tries again only
when named its head, until its deadline.

Waiting parks a thread, not a process (the web server runs threaded workers), holds no database
connection (it goes back to the process's pool while the thread sleeps) and costs the database
nothing while nothing changes: the head re-checks on its own every ``POLL`` seconds only in
case a change was announced to nobody (a lease that simply ran out, tokens issued).
"""

from __future__ import annotations

import time

from common import db
from locks import metrics
from locks.waiting import POLL, Queues, Try, queues
from sherdlock import WalletKey


class QueueFull(Exception):
    """This process has no room for another waiting request right now."""


def wait_for(key: WalletKey, seconds: float, attempt, clock=time.monotonic, client: str = ""):
    """Call ``attempt()`` until it succeeds, waiting in the queue of ``key`` between tries.

    ``attempt`` raises ``sherdlock.FundsLocked`` while others hold the funds. A newcomer tries
    at once only if nobody waits for ``key`` yet; then only as the queue's head. Newcomers of
    one process that arrive together make one try between them (``Queues.first_try``). Return
    what the successful attempt returned; after ``seconds`` re-raise the last FundsLocked.
    Waiting takes one of the process's slots, within the share of ``client`` (a namespace);
    QueueFull if it finds none.
    """
    from sherdlock import FundsLocked

    deadline = clock() + seconds
    q = queues()
    q.start()
    first: Try | None = None  # the try this request made for the others, until it is told
    try:
        if not q.queued(key):
            found, mine = q.first_try(key)
            if mine:
                first = found
                try:
                    return attempt()
                except FundsLocked:
                    first.locked = True
            else:
                db.release()  # waiting for another thread, it holds no pooled connection
                if not (found.done.wait(max(0.0, deadline - clock())) and found.locked):
                    try:
                        return attempt()
                    except FundsLocked:
                        pass
        return _queued(q, key, seconds, deadline, attempt, clock, first, client)
    finally:
        if first is not None:
            q.tried(key, first)


def _queued(
    q: Queues, key: WalletKey, seconds: float, deadline: float, attempt, clock, first, client: str
):
    """Wait in the queue of ``key`` and try as its head (``wait_for`` after its first look).

    ``first``, the try made for the others here, is told once this request has its place.
    """
    from sherdlock import FundsLocked

    if not q.slots.take(client):
        raise QueueFull()
    metrics.WAITING_REQUESTS.inc()
    try:
        ticket = q.join(key, seconds)
        if first is not None:
            q.tried(key, first)
        last: FundsLocked | None = None
        served = False
        try:
            while (left := deadline - clock()) > 0:
                if q.is_head(ticket):
                    try:
                        result = attempt()
                    except FundsLocked as exc:
                        last = exc
                    else:
                        served = True
                        return result
                db.release()  # a sleeping request holds no database connection
                if not q.wait(ticket, min(left, POLL)) and not q.is_head(ticket):
                    # Nothing heard for a while: is the head still alive? (One look per
                    # process in half the interval serves every waiter of the process.)
                    q.refresh(fresh_for=POLL / 2)
        finally:
            q.leave(ticket, served)
    finally:
        metrics.WAITING_REQUESTS.dec()
        q.slots.give_back(client)
    if last is None:
        return attempt()  # never got to the head: one last look before answering
    raise last
