"""Make a wallet warm for a replica: one it has selected from lately, so that it keeps a queue.

A replica keeps the rows a fetch did not lock only for a wallet it selected from within its
cache's life (``sherdlock.Selector``): the first fetch of a wallet leaves no queue. Tests that
watch a queue warm the wallet first, leaving no queue and no lock behind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sherdlock import Selector
from tests.helpers.processes import wait_for

if TYPE_CHECKING:
    from locks.listener import CacheListener


def warm(
    selector: Selector, wallet: str, currency: str = "USD", listener: CacheListener | None = None
) -> None:
    """Fetch one unit of ``wallet`` and release it by tx id (which queues nothing back).

    Given the replica's cache ``listener``, also wait until it has heard of that lock and its
    release. Heard after a later fetch has queued the same token, the lock's notification would
    drop it from that queue (a late notification costs a fetch, never a wrong selection, but a
    test watching the queue would see it vanish).
    """
    released = listener.stats.received["released"] if listener is not None else 0
    selection = selector.select(f"warm-{wallet}", wallet, currency, 1)
    selector.release(selection.tx_id, selection.fence)
    assert not selector.cache.peek(selection.key)
    if listener is not None:
        # Notifications arrive in commit order: the release's comes after the lock's.
        wait_for(
            lambda: listener.stats.received["released"] > released,
            "the listener to hear of the warm-up",
        )
