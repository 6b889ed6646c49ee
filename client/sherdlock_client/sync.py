"""The blocking client: one per process or per server, shared by its threads."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import TypeVar

from ._calls import Call, Calls, Page
from ._http import Server
from ._pool import MAX_IDLE, Pool
from .errors import ApiError, ClientError
from .lease import Keepers, LeaseKeeper
from .models import (
    DEFAULT_STRATEGY,
    Balances,
    Issued,
    Lock,
    NewToken,
    Output,
    Quantity,
    Selection,
    Spent,
    Strategy,
    Token,
)
from .retries import Attempts, RetryHook, RetryPolicy

T = TypeVar("T")

CONNECT_TIMEOUT = 5.0
# Longer than the server's own request timeout, so that a slow answer is the server's to end.
READ_TIMEOUT = 60.0


class Client:
    """Call the Sherdlock API at ``base_url`` (the server's root) with ``api_key``.

    Connections are kept alive in a pool that the client's threads share. ``timeout``
    bounds the wait for each answer (stretched by a select's ``wait``), ``connect_timeout``
    each connection. Calls are retried as ``retries`` says; ``on_retry`` is told of each
    retry before its pause.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = READ_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
        retries: RetryPolicy | None = None,
        on_retry: RetryHook | None = None,
        max_idle: int = MAX_IDLE,
    ) -> None:
        server = Server.parse(base_url)
        self._calls = Calls(server, api_key)
        self._pool = Pool(server, connect_timeout, max_idle)
        self.timeout = timeout
        self.retries = retries or RetryPolicy()
        self.on_retry = on_retry
        self._keepers = Keepers()
        # Seams for tests: how the client tells time, sleeps and draws its jitter.
        self._clock: Callable[[], float] = time.monotonic
        self._sleep: Callable[[float], None] = time.sleep
        self._rng = random.Random()

    def __repr__(self) -> str:
        return f"Client({self._calls.server.root!r})"  # never the key

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the kept-alive connections."""
        self._pool.close()

    @property
    def connections_opened(self) -> int:
        """Return how many connections this client has opened so far."""
        return self._pool.opened

    # -- the API -------------------------------------------------------------------------

    def issue(self, tokens: Iterable[NewToken], *, retry_for: float | None = None) -> Issued:
        """Issue 1..1000 tokens in one transaction; identical ones already stored are kept.

        A lost answer is not retried (a repeat would answer ``created=0``): sending the same
        tokens again is safe and stores nothing twice.
        """
        return self._run(self._calls.issue(tokens), retry_for)

    def select(
        self,
        tx_id: str,
        wallet: str,
        currency: str,
        quantity: Quantity,
        *,
        strategy: Strategy = DEFAULT_STRATEGY,
        wait: int = 0,
        retry_locked_for: float = 0.0,
        retry_for: float | None = None,
    ) -> Selection:
        """Lock tokens of ``wallet`` worth at least ``quantity`` of ``currency`` for ``tx_id``.

        ``wait`` (seconds, up to 60): the server holds the request, in turn behind earlier
        waiters, until the funds others lock come free. ``retry_locked_for``: retry
        ``FundsLocked`` after its hint for up to that many seconds. Raise InsufficientFunds,
        FundsLocked, NoExactMatch or MaxTokensExceeded when it cannot be done. Repeating an
        identical select returns the same selection (``created`` false).
        """
        call = self._calls.select(
            tx_id,
            wallet,
            currency,
            quantity,
            strategy=strategy,
            wait=wait,
            retry_locked_for=retry_locked_for,
        )
        return self._run(call, retry_for)

    def select_legs(
        self,
        tx_id: str,
        wallet: str,
        legs: Mapping[str, Quantity] | Iterable[tuple[str, Quantity]],
        *,
        strategy: Strategy = DEFAULT_STRATEGY,
        retry_locked_for: float = 0.0,
        retry_for: float | None = None,
    ) -> Selection:
        """Lock tokens of 2..8 currencies (``{"USD": 150, "EUR": 20}``), every leg or none.

        A leg that cannot be locked raises as select does, its currency in ``leg``.
        """
        call = self._calls.select_legs(
            tx_id, wallet, legs, strategy=strategy, retry_locked_for=retry_locked_for
        )
        return self._run(call, retry_for)

    def spend(
        self, tx_id: str, outputs: Iterable[Output], *, retry_for: float | None = None
    ) -> Spent:
        """Spend the selection of ``tx_id`` into ``outputs``; stop keeping its lease."""
        call = self._calls.spend(tx_id, outputs)
        self._keepers.spending(tx_id, True)
        try:
            spent = self._run(call, retry_for)
            self._stop_keepers(tx_id)
        finally:
            self._keepers.spending(tx_id, False)
        return spent

    def release(self, tx_id: str, *, retry_for: float | None = None) -> Selection:
        """Unlock the tokens of ``tx_id`` (stop keeping its lease first); repeating is harmless."""
        self._stop_keepers(tx_id)
        return self._run(self._calls.release(tx_id), retry_for)

    def extend(
        self, tx_id: str, seconds: int | None = None, *, retry_for: float | None = None
    ) -> Selection:
        """Renew the lease of ``tx_id`` for the server's lease, or ``seconds`` from now."""
        return self._run(self._calls.extend(tx_id, seconds), retry_for)

    def selection(self, tx_id: str, *, retry_for: float | None = None) -> Selection:
        """Return the selection of ``tx_id``."""
        return self._run(self._calls.selection(tx_id), retry_for)

    def balances(
        self, wallet: str, currency: str | None = None, *, retry_for: float | None = None
    ) -> Balances:
        """Return the unspent, locked and available quantities of ``wallet`` per currency."""
        return self._run(self._calls.balances(wallet, currency), retry_for)

    def alive(self, *, retry_for: float | None = None) -> bool:
        """Return True when the web server answers its liveness probe (``/healthz``)."""
        return self._run(self._calls.alive(), retry_for)

    def selections(
        self,
        wallet: str | None = None,
        currency: str | None = None,
        status: str | None = None,
        *,
        page_size: int | None = None,
    ) -> Iterator[Selection]:
        """Iterate over the selections, newest first, page by page."""
        return self._pages(self._calls.selections(wallet, currency, status, page_size))

    def locks(
        self,
        wallet: str | None = None,
        currency: str | None = None,
        spender_tx_id: str | None = None,
        state: str | None = None,
        *,
        page_size: int | None = None,
    ) -> Iterator[Lock]:
        """Iterate over the lock table (``state`` live or expired), newest first."""
        return self._pages(self._calls.locks(wallet, currency, spender_tx_id, state, page_size))

    def tokens(
        self,
        wallet: str | None = None,
        currency: str | None = None,
        spent: bool | None = None,
        *,
        page_size: int | None = None,
    ) -> Iterator[Token]:
        """Iterate over the tokens, newest first."""
        return self._pages(self._calls.tokens(wallet, currency, spent, page_size))

    def keep_alive(
        self,
        tx_id: str,
        interval: float,
        *,
        seconds: int | None = None,
        on_lost: Callable[[], None] | None = None,
        max_failures: int = 3,
    ) -> LeaseKeeper:
        """Return a keeper that extends the lease of ``tx_id`` every ``interval`` seconds.

        Start it (``with`` or ``.start()``). It stops quietly when this client spends or
        releases the selection; when the server answers that the lease is over, or after
        ``max_failures`` failed renewals in a row, it stops and calls ``on_lost``. Pick
        ``interval`` well below the lease so that those failures still fit in it.
        """

        def renew() -> bool:
            try:
                self.extend(tx_id, seconds)
            except ApiError as error:
                return self._keepers.alive_after(tx_id, error)
            return True

        def lost() -> None:
            self._keepers.forget(tx_id, keeper)
            if on_lost is not None:
                on_lost()

        keeper = LeaseKeeper(
            renew, interval, lost, max_failures=max_failures, name=f"sherdlock-lease-{tx_id}"
        )
        self._keepers.add(tx_id, keeper)
        return keeper

    # -- sending -------------------------------------------------------------------------

    def _stop_keepers(self, tx_id: str) -> None:
        for keeper in self._keepers.take(tx_id):
            keeper.stop()

    def _pages(self, call: Call[Page[T]]) -> Iterator[T]:
        while True:
            page = self._run(call, None)
            yield from page.items
            if page.next is None:
                return
            call = self._calls.next_page(call, page.next)

    def _run(self, call: Call[T], retry_for: float | None) -> T:
        started = self._clock()
        attempts: Attempts | None = None
        while True:
            try:
                answer = self._pool.exchange(call.data, call.method, self.timeout + call.waits)
                return call.answer(answer)
            except ClientError as error:
                if attempts is None:
                    attempts = Attempts(
                        self.retries,
                        call.method,
                        call.target,
                        idempotent=call.idempotent,
                        now=started,
                        retry_for=retry_for,
                        retry_locked_for=call.retry_locked_for,
                        hook=self.on_retry,
                        rng=self._rng,
                    )
                pause = attempts.after(error, self._clock())
            self._sleep(pause)
