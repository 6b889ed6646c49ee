"""The selector's token store on PostgreSQL: the shared lock table is the source of truth."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import DEFAULT_DB_ALIAS, connections

from locks import sql
from sherdlock import Candidate, FetchResult, LockOutcome, Supply, WalletKey


def _earliest(values: list[datetime | None]) -> datetime | None:
    present = [value for value in values if value is not None]
    return min(present) if present else None


class PostgresTokenStore:
    """Implement ``sherdlock.TokenStore`` with one short statement per call.

    ``lease`` is the lock lifetime in seconds, stamped by the database clock so that replicas
    with skewed clocks agree on expiry. Statements run on Django's connection for ``using``
    (per thread), in autocommit mode unless the caller opened a transaction.
    """

    def __init__(self, lease: float = 60.0, using: str = DEFAULT_DB_ALIAS) -> None:
        if lease <= 0:
            raise ValueError("lease must be positive")
        self.lease = float(lease)
        self.using = using
        self.round_trips = 0  # statements sent; read by benchmarks

    def _execute(self, statement: str, params: dict[str, object]) -> list[tuple]:
        self.round_trips += 1
        with connections[self.using].cursor() as cursor:
            cursor.execute(statement, params)
            return cursor.fetchall() if cursor.description else []

    def next_fence(self) -> int:
        return int(self._execute(sql.NEXT_FENCE, {})[0][0])

    def fetch_and_lock(
        self, key: WalletKey, tx_id: str, fence: int, need: int, limit: int
    ) -> FetchResult:
        rows = self._execute(sql.FETCH_AND_LOCK, {
            "wallet": key.wallet, "currency": key.currency, "tx_id": tx_id, "fence": fence,
            "need": need, "limit": limit, "lease": self.lease,
        })
        granted, spare, expiries = [], [], []
        conflicts = 0
        for token_id, quantity, attempted, was_granted, expires_at in rows:
            candidate = Candidate(int(token_id), int(quantity))
            if was_granted:
                granted.append(candidate)
                expiries.append(expires_at)
            elif attempted:
                conflicts += 1  # locked by a concurrent selection after our snapshot
            else:
                spare.append(candidate)
        return FetchResult(
            granted=granted, spare=spare, exhausted=len(rows) < limit,
            expires_at=_earliest(expiries), conflicts=conflicts,
        )

    def try_lock(self, tx_id: str, fence: int, candidates: Sequence[Candidate]) -> LockOutcome:
        if not candidates:
            return LockOutcome()
        by_id = {candidate.token_id: candidate for candidate in candidates}
        rows = self._execute(sql.TRY_LOCK, {
            "token_ids": list(by_id), "tx_id": tx_id, "fence": fence, "lease": self.lease,
        })
        return LockOutcome(
            granted=[by_id[int(token_id)] for token_id, _ in rows],
            expires_at=_earliest([expires_at for _, expires_at in rows]),
        )

    def unlock(self, tx_id: str, fence: int, token_ids: Sequence[int] | None = None) -> int:
        params: dict[str, object] = {"tx_id": tx_id, "fence": fence}
        if token_ids is None:
            statement = sql.UNLOCK_ALL
        else:
            if not token_ids:
                return 0
            statement, params["token_ids"] = sql.UNLOCK_SOME, list(token_ids)
        self.round_trips += 1
        with connections[self.using].cursor() as cursor:
            cursor.execute(statement, params)
            return cursor.rowcount

    def supply(self, key: WalletKey, tx_id: str) -> Supply:
        unspent, locked = self._execute(sql.SUPPLY, {
            "wallet": key.wallet, "currency": key.currency, "tx_id": tx_id,
        })[0]
        return Supply(unspent=int(unspent), locked_by_others=int(locked))
