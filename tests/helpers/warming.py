"""Make a wallet warm for a replica: one it has selected from lately, so that it keeps a queue.

A replica keeps the rows a fetch did not lock only for a wallet it selected from within its
cache's life (``sherdlock.Selector``): the first fetch of a wallet leaves no queue. Tests that
watch a queue warm the wallet first, leaving no queue and no lock behind.
"""

from __future__ import annotations

from sherdlock import Selector


def warm(selector: Selector, wallet: str, currency: str = "USD") -> None:
    """Fetch one unit of ``wallet`` and release it by tx id (which queues nothing back)."""
    selection = selector.select(f"warm-{wallet}", wallet, currency, 1)
    selector.release(selection.tx_id, selection.fence)
    assert not selector.cache.peek(selection.key)
