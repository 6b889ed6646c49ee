"""The selector's token store on PostgreSQL: the shared lock table is the source of truth."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from clients import throttling
from common import db, sessions
from locks.sql import batches, locking, turns
from sherdlock import (
    Candidate,
    Claim,
    ClaimRefused,
    FetchResult,
    LockOutcome,
    Supply,
    WalletKey,
)
from sherdlock.strategies import MAX_EXAMINED, ORDER_RANDOM


@dataclass(frozen=True)
class RecordedSelection:
    """The selection row a recording statement wrote, and the tokens it holds."""

    id: int
    created_at: datetime
    # (token id, token tx id, token index, quantity), by token id.
    tokens: tuple[tuple[int, str, int, int], ...]


class TxIdTaken(ClaimRefused):
    """The transaction id already has a selection or names issued tokens; nothing was locked."""


class PostgresTokenStore:
    """Implement ``sherdlock.TokenStore`` with one short statement per call.

    ``lease`` is the lock lifetime in seconds, stamped by the database clock so that replicas
    with skewed clocks agree on expiry. For a recording claim (the service's selections) the
    store writes the selection row in the statement that completes it and refuses
    transaction ids already in use (``TxIdTaken``). With ``durable`` off, grants
    and releases commit asynchronously (see ``common.sql.ASYNC_COMMIT``) when they run in
    autocommit; inside a caller's transaction they follow that transaction. Statements run on
    Django's connection for ``using`` (per thread), prepared after ``prepare_threshold`` runs
    (``common.db``; None never prepares).
    """

    def __init__(
        self,
        lease: float = 60.0,
        using: str = DEFAULT_DB_ALIAS,
        *,
        durable: bool = False,
        prepare_threshold: int | None = 2,
    ) -> None:
        if lease <= 0:
            raise ValueError("lease must be positive")
        self.lease = float(lease)
        self.using = using
        self.durable = durable
        self.prepare_threshold = prepare_threshold
        self.round_trips = 0  # statements sent; read by benchmarks

    # -- TokenStore ----------------------------------------------------------------------

    def fetch_and_lock(self, claim: Claim, limit: int) -> FetchResult:
        row = self._lock(True, claim, {"limit": limit, "need": Decimal(claim.need)})
        (
            fence,
            ids,
            quantities,
            expires_at,
            attempted,
            short_batch,
            exhausted,
            free,
            batch_rows,
            batch_total,
            unspent,
            spare_ids,
            spare_quantities,
            turn_taken,
            is_open,
            recorded_id,
            recorded_at,
            tokens,
        ) = row
        self._check_open(claim, is_open)
        granted = _candidates(ids, quantities)
        shortfall = None
        if unspent is not None:
            total, counted = int(unspent[0]), int(unspent[1])
            others = total - int(free) - claim.held_total
            shortfall = Supply(
                unspent=total,
                locked_by_others=max(0, others),
                complete=counted <= MAX_EXAMINED,
            )
        return FetchResult(
            granted=granted,
            spare=_candidates(spare_ids, spare_quantities),
            exhausted=bool(exhausted),
            expires_at=expires_at,
            # Chosen but not granted: a concurrent selection locked them after our snapshot.
            conflicts=int(attempted) - len(granted),
            fence=int(fence),
            shortfall=shortfall,
            short_batch=bool(short_batch),
            too_many=free is not None and free == batches.TOO_MANY,
            batch_rows=int(batch_rows),
            batch_total=int(batch_total),
            turn_taken=bool(turn_taken),
            record=self._recorded(claim, int(fence), granted, recorded_id, recorded_at, tokens),
        )

    def try_lock(self, claim: Claim, candidates: Sequence[Candidate]) -> LockOutcome:
        if not candidates:
            return LockOutcome(fence=claim.fence)
        ids = sorted({candidate.token_id for candidate in candidates})
        row = self._lock(False, claim, {"token_ids": ids})
        fence, granted_ids, quantities, expires_at, is_open, recorded_id, recorded_at, tokens = row
        self._check_open(claim, is_open)
        granted = _candidates(granted_ids, quantities)
        return LockOutcome(
            granted=granted,
            expires_at=expires_at,
            fence=int(fence),
            record=self._recorded(claim, int(fence), granted, recorded_id, recorded_at, tokens),
        )

    def candidates(
        self, key: WalletKey, smallest: int, largest: int, cap: int | None = None
    ) -> list[Candidate]:
        params = {
            "wallet": key.wallet,
            "currency": key.currency,
            "smallest": smallest,
            "largest": largest,
            "cap": None if cap is None else Decimal(cap),
        }
        ids, quantities = db.one(self._execute(locking.CANDIDATES, params))
        return _candidates(ids, quantities)

    def unlock(
        self,
        tx_id: str,
        fence: int,
        token_ids: Sequence[int] | None = None,
        wallet: str | None = None,
    ) -> int:
        connection = connections[self.using]
        params: dict[str, Any] = {
            "tx_id": tx_id,
            "fence": fence,
            "wallet": wallet,
            "token_ids": None,
            "synchronous_commit": self._commit_mode(connection),
        }
        if token_ids is not None:
            if not token_ids:
                return 0
            params["token_ids"] = sorted(token_ids)
        cursor = self._execute(locking.UNLOCK_STATEMENTS[wallet is not None], params, connection)
        return cursor.rowcount

    def supply(self, key: WalletKey, tx_id: str) -> Supply:
        cursor = self._execute(
            locking.SUPPLY,
            {
                "wallet": key.wallet,
                "currency": key.currency,
                "tx_id": tx_id,
            },
        )
        unspent, locked, complete = db.one(cursor)
        return Supply(unspent=int(unspent), locked_by_others=int(locked), complete=bool(complete))

    def take_turn(self, key: WalletKey, wait: float) -> bool:
        """Take the key's turn on this thread's session (``locks.sql.turns``), waiting at most
        ``wait`` seconds behind whoever holds it or asked before.

        Behind a transaction-pooling proxy a session lock would stay with whichever server
        session ran the statement, and inside a caller's transaction a timed-out wait would
        abort it: no turn is taken there.
        """
        if sessions.transaction_pooled() or connections[self.using].in_atomic_block:
            return False
        return self._waited(turns.TAKE_TURN, key, wait)

    def await_turn(self, key: WalletKey, wait: float) -> bool:
        """Wait at most ``wait`` seconds for nobody to hold or ask for the key's turn."""
        if connections[self.using].in_atomic_block:
            return False
        return self._waited(turns.AWAIT_TURN, key, wait)

    def end_turn(self, key: WalletKey) -> None:
        """Give back the key's turn this thread's session holds.

        A session that cannot say so is closed rather than left to the pool holding the turn:
        the turn ends with it.
        """
        try:
            self._execute(turns.END_TURN, {"wallet": key.wallet, "currency": key.currency})
        except Exception:
            raw = connections[self.using].connection
            if raw is not None:
                raw.close()
            raise

    # -- internals -----------------------------------------------------------------------

    def _lock(self, fetch: bool, claim: Claim, params: dict[str, Any]) -> tuple:
        """Run the locking statement of this store's kind for ``claim``; return its row."""
        # Looked up once: Django's lookup of a thread's connection costs microseconds a call.
        connection = connections[self.using]
        params.update(
            {
                "tx_id": claim.tx_id,
                "fence": claim.fence,
                "synchronous_commit": self._commit_mode(connection),
                "lease": self.lease,
                "wallet": claim.key.wallet,
                "currency": claim.key.currency,
            }
        )
        if claim.record:
            params.update(
                {
                    "namespace": claim.namespace,
                    "quantity": Decimal(claim.quantity),
                    "held_ids": [c.token_id for c in claim.held],
                    "held_total": Decimal(claim.held_total),
                    "held_expiry": claim.held_expiry,
                    "strategy": claim.strategy,
                }
            )
        contested = fetch and claim.contested
        if fetch:
            params["spare"] = claim.spare
        if contested:
            # A caller's transaction would hold the turn's lock until it ends (locking.TURN).
            params["yield_to_turn"] = claim.yield_to_turn and not connection.in_atomic_block
        # The first locking statement of a rate-limited request takes its units
        # (clients.throttling.charging) and locks nothing if a bucket refuses. The meter stays
        # pending until the statement has run: one that fails (cancelled, say) takes nothing, as
        # its transaction rolls back, and the request is then charged on its way out.
        meter = throttling.pending()
        if meter is not None:
            params.update(meter.params())
        # A random fetch of a contested key, or of one the caller keeps no queue of (a cold
        # one), reads from the wallet's front (batches.FRONT_BATCH); a cold one answers no
        # spare rows.
        front = fetch and claim.order == ORDER_RANDOM and (contested or not claim.spare)
        variant = locking.LockStatement(
            choice=claim.order if fetch else "given",
            front=front,
            contested=contested,
            record=claim.record,
            metered=meter is not None,
        )
        row = db.one(self._execute(locking.LOCK_STATEMENTS[variant], params, connection))
        if meter is None:
            return row
        throttling.take_pending()
        *columns, admitted, refusals = row
        if not admitted:
            raise throttling.RateLimited(throttling.refusal_wait(refusals or ()))
        return tuple(columns)

    def _waited(self, statement: str, key: WalletKey, wait: float) -> bool:
        """Run a statement that waits for an advisory lock; False if the wait timed out."""
        params = {
            "wallet": key.wallet,
            "currency": key.currency,
            "wait": f"{max(1, round(wait * 1000))}ms",
        }
        try:
            self._execute(statement, params)
        except OperationalError as exc:
            if isinstance(exc.__cause__, psycopg.errors.LockNotAvailable):
                return False
            raise
        return True

    def _commit_mode(self, connection: BaseDatabaseWrapper) -> str | None:
        """Return the locking statements' synchronous_commit (locking.COMMIT_MODE).

        Asynchronous unless leases are durable; inside a caller's transaction the statement's
        commit is the caller's, so its commit mode is left alone (it may hold a spend).
        """
        if self.durable or connection.in_atomic_block:
            return None
        return "off"

    def _check_open(self, claim: Claim, is_open: bool) -> None:
        if not is_open:
            raise TxIdTaken(f"transaction id {claim.tx_id} is already in use")

    def _recorded(
        self,
        claim: Claim,
        fence: int,
        granted: list[Candidate],
        recorded_id: int | None,
        recorded_at: datetime | None,
        tokens: list | None,
    ) -> RecordedSelection | None:
        if recorded_id is not None:
            # RECORDED_RESULT stamps and lists the selection whenever it wrote one.
            assert recorded_at is not None and tokens is not None
            return RecordedSelection(
                id=recorded_id,
                created_at=recorded_at,
                tokens=tuple((int(i), str(t), int(n), int(q)) for i, t, n, q in tokens),
            )
        if claim.record and claim.held_total + sum(c.quantity for c in granted) >= claim.quantity:
            # Complete, but a concurrent request of the same tx id recorded its selection
            # first: ours must go (the selector releases this call's locks too).
            raise TxIdTaken(
                f"transaction id {claim.tx_id} was taken concurrently",
                locked_nothing=not granted,
                fence=fence,
            )
        return None

    def _execute(
        self,
        statement: str,
        params: dict[str, Any],
        connection: BaseDatabaseWrapper | None = None,
    ) -> psycopg.Cursor:
        self.round_trips += 1
        return db.execute(statement, params, self.using, self.prepare_threshold, connection)


def _candidates(ids: list[int] | None, quantities: list[Decimal] | None) -> list[Candidate]:
    if not ids:
        return []
    return [Candidate(int(i), int(q)) for i, q in zip(ids, quantities or (), strict=True)]
