"""Claims on the token store as the store's tests make them: alice's USD unless told."""

from __future__ import annotations

from sherdlock import Claim, WalletKey

KEY = WalletKey("alice", "USD")


def claim(tx_id: str, fence: int | None, need: int = 1, key: WalletKey = KEY) -> Claim:
    return Claim(tx_id, key, need, fence)
