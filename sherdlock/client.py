"""A small HTTP client for the Sherdlock REST API, with client-side lease keeping.

Standard library only, so wallet backends can use it without Django. Every method sends one
request and returns the decoded JSON answer; errors come back as the core's exceptions where
they mean the same thing (``InsufficientFunds``, ``FundsLocked``, ``NoExactMatch``,
``TooManyInputs``, as subclasses that also carry the answer's ``status`` and ``code``), else as
``ClientError`` (both in ``sherdlock.answers``).
"""

from __future__ import annotations

import dataclasses
import json
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

from .answers import ClientError, selector_error
from .errors import FundsLocked
from .lease import LeaseKeeper
from .strategies import Strategy
from .types import WalletKey

API_PREFIX = "/api/v1/"
# Answers to a renewal that mean the lease is over for good: renewing again cannot help.
LEASE_OVER = frozenset({"lease_lost", "not_locked", "already_spent", "not_found"})


def strategy_terms(strategy: Strategy) -> dict[str, Any]:
    """Return the body keys of a selection request that name `strategy` and its terms."""
    if strategy == Strategy():
        return {}
    terms: dict[str, Any] = {"strategy": strategy.name}
    if strategy.max_change is not None:
        terms["max_change"] = str(strategy.max_change)
    if strategy.max_tokens is not None:
        terms["max_tokens"] = strategy.max_tokens
    if strategy.fallback:
        terms["fallback"] = True
    return terms


def _quantity(value: int | str | Decimal) -> str:
    # Quantities go over the wire as decimal strings: JSON numbers lose precision above 2**53.
    number = Decimal(value)
    if number != number.to_integral_value():
        raise ValueError(f"quantities are whole numbers, got {value!r}")
    return str(int(number))


def _output(spec: Mapping[str, Any] | Any) -> dict[str, Any]:
    if isinstance(spec, Mapping):
        fields = dict(spec)
    elif dataclasses.is_dataclass(spec) and not isinstance(spec, type):
        fields = dataclasses.asdict(spec)
    else:
        raise TypeError(f"an output is a mapping or a dataclass, not {type(spec).__name__}")
    fields["quantity"] = _quantity(fields["quantity"])
    return fields


def _retry_after(header: str | None, body: Mapping[str, Any]) -> float | None:
    # The body's value is exact; the header rounds up to whole seconds.
    values: tuple[Any, ...] = (body.get("retry_after"), header)
    for value in values:
        try:
            return max(0.0, float(value))
        except (TypeError, ValueError):
            continue  # absent, or an HTTP date: fall back
    return None


class SherdlockClient:
    """Call the Sherdlock API at ``base_url`` (the server root) with an API key.

    ``timeout`` bounds every request in seconds. One client may be shared by threads.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 10.0,
        opener: urllib.request.OpenerDirector | None = None,
    ) -> None:
        root = base_url.rstrip("/")
        if root.endswith(API_PREFIX.rstrip("/")):
            root = root[: -len(API_PREFIX.rstrip("/"))]
        self.api_root = root + API_PREFIX
        self._api_key = api_key
        self.timeout = timeout
        self._opener = opener or urllib.request.build_opener()
        self._keepers: dict[str, list[LeaseKeeper]] = {}
        self._spending: set[str] = set()
        self._keepers_lock = threading.Lock()
        # Seams for tests: how the client tells time, sleeps and draws its jitter.
        self._clock: Callable[[], float] = time.monotonic
        self._sleep: Callable[[float], None] = time.sleep
        self._rng = random.Random()

    def __repr__(self) -> str:
        return f"SherdlockClient({self.api_root!r})"  # never the key

    # -- the API ---------------------------------------------------------------------------

    def select(
        self,
        tx_id: str,
        wallet: str,
        currency: str,
        quantity: int | str | Decimal,
        *,
        wait: int = 0,
        retry_for: float = 0.0,
        strategy: Strategy | None = None,
    ) -> dict[str, Any]:
        """Lock tokens worth at least ``quantity``; return tx_id, tokens, total, change, inputs,
        strategy, expires_at, fence.

        ``strategy`` (e.g. ``Strategy("exact", max_change=5)``) picks the tokens; the default
        is random. An exact selection without a match raises NoExactMatch, a consolidating one
        that needs too many tokens TooManyInputs.

        Raise InsufficientFunds or FundsLocked (with the server's ``retry_after``) when the
        wallet cannot cover it now. With ``wait`` the server keeps the request up to that many
        seconds, in arrival order behind earlier waiters, and answers as soon as it gets the
        funds. With ``retry_for`` the client retries "funds locked" answers for up to that
        many seconds, each after the server's hint with random jitter (so that refused clients
        do not all come back at once). Repeating the same request returns the same selection.
        """
        body: dict[str, Any] = {
            "tx_id": tx_id,
            "wallet": wallet,
            "currency": currency,
            "quantity": _quantity(quantity),
            **strategy_terms(strategy or Strategy()),
        }
        if wait:
            body["wait"] = int(wait)
        return self._selecting(body, retry_for, {currency: int(body["quantity"])})

    def select_legs(
        self,
        tx_id: str,
        wallet: str,
        legs: Mapping[str, int | str | Decimal] | Iterable[tuple[str, int | str | Decimal]],
        *,
        retry_for: float = 0.0,
        strategy: Strategy | None = None,
    ) -> dict[str, Any]:
        """Lock tokens of several currencies for ``tx_id``, every leg or none; return as select,
        with ``legs``: each leg's currency, quantity, total, change and tokens.

        ``legs`` maps each currency to its quantity ({"USD": 150, "EUR": 20}), 2 to 8 of them;
        ``strategy`` applies to every leg. A leg that cannot be locked raises as select does,
        for that leg's currency (its ``leg``), and nothing stays locked. The server answers at
        once (a request with legs does not wait); ``retry_for`` retries as for select.
        """
        pairs = list(legs.items()) if isinstance(legs, Mapping) else list(legs)
        body: dict[str, Any] = {
            "tx_id": tx_id,
            "wallet": wallet,
            "legs": [{"currency": c, "quantity": _quantity(q)} for c, q in pairs],
            **strategy_terms(strategy or Strategy()),
        }
        asked = {leg["currency"]: int(leg["quantity"]) for leg in body["legs"]}
        return self._selecting(body, retry_for, asked)

    def _selecting(
        self, body: dict[str, Any], retry_for: float, asked: dict[str, int]
    ) -> dict[str, Any]:
        """Post a selection, retrying funds locked answers for ``retry_for`` seconds."""
        deadline = self._clock() + retry_for
        while True:
            try:
                return self._post("selections/", body)
            except ClientError as exc:
                leg = exc.body.get("leg")
                currency = leg if isinstance(leg, str) and leg in asked else next(iter(asked))
                key = WalletKey(str(body["wallet"]), currency)
                error = selector_error(exc, key, asked[currency])
                if isinstance(leg, str) and error is not exc:
                    error.leg = leg  # type: ignore[attr-defined]
                if not isinstance(error, FundsLocked):
                    raise error from None
                pause = error.retry_after * self._rng.uniform(0.5, 1.5)
                if self._clock() + pause > deadline:
                    raise error from None
                self._sleep(pause)

    def spend(self, tx_id: str, outputs: Iterable[Mapping[str, Any] | Any]) -> dict[str, Any]:
        """Spend the selection of ``tx_id`` into ``outputs``; stop keeping its lease once spent.

        Each output is a mapping (or dataclass) with index, wallet, currency and quantity.
        """
        body = {"outputs": [_output(spec) for spec in outputs]}
        with self._keepers_lock:
            self._spending.add(tx_id)
        try:
            answer = self._post(f"selections/{self._tx(tx_id)}/spend/", body)
            self._stop_keepers(tx_id)
        finally:
            with self._keepers_lock:
                self._spending.discard(tx_id)
        return answer

    def release(self, tx_id: str) -> dict[str, Any]:
        """Unlock the tokens of ``tx_id``; stop keeping its lease first."""
        self._stop_keepers(tx_id)
        return self._post(f"selections/{self._tx(tx_id)}/release/", {})

    def extend(self, tx_id: str, seconds: int | None = None) -> dict[str, Any]:
        """Renew the lease of ``tx_id`` for the server's lease, or for ``seconds`` from now."""
        body = {} if seconds is None else {"seconds": int(seconds)}
        return self._post(f"selections/{self._tx(tx_id)}/extend/", body)

    def keep_alive(
        self,
        tx_id: str,
        interval: float,
        *,
        on_lost: Callable[[], None] | None = None,
        max_failures: int = 3,
    ) -> LeaseKeeper:
        """Return a LeaseKeeper that extends the lease of ``tx_id`` every ``interval`` seconds.

        Start it (``.start()`` or ``with``). It stops quietly when this client spends or
        releases the selection. When the server answers that the lease is over (expired and
        taken over, or spent or released elsewhere), or after ``max_failures`` failed renewals
        in a row, it stops and calls ``on_lost``. Pick ``interval`` well below the lease so
        that those failures still fit in it.
        """

        def lost() -> None:
            self._forget(tx_id, keeper)
            if on_lost is not None:
                on_lost()

        keeper = LeaseKeeper(
            lambda: self._renew(tx_id),
            interval,
            lost,
            max_failures=max_failures,
            name=f"sherdlock-lease-{tx_id}",
        )
        with self._keepers_lock:
            self._keepers.setdefault(tx_id, []).append(keeper)
        return keeper

    # -- plumbing --------------------------------------------------------------------------

    def _renew(self, tx_id: str) -> bool:
        try:
            self.extend(tx_id)
        except ClientError as exc:
            if exc.code not in LEASE_OVER:
                raise  # transient (network, 5xx, throttled): the keeper retries
            with self._keepers_lock:
                # A renewal that lands just after our own spend is answered already_spent;
                # that is the spend succeeding, not the lease being lost. If the spend
                # fails, the next renewal tells.
                return tx_id in self._spending
        return True

    def _forget(self, tx_id: str, keeper: LeaseKeeper) -> None:
        with self._keepers_lock:
            keepers = self._keepers.get(tx_id, [])
            if keeper in keepers:
                keepers.remove(keeper)
            if not keepers:
                self._keepers.pop(tx_id, None)

    def _stop_keepers(self, tx_id: str) -> None:
        with self._keepers_lock:
            keepers = self._keepers.pop(tx_id, [])
        for keeper in keepers:
            keeper.stop()

    @staticmethod
    def _tx(tx_id: str) -> str:
        return urllib.parse.quote(tx_id, safe="")

    def _post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.api_root + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={
                "Authorization": f"Api-Key {self._api_key}",
                "Content-Type": "application/json",
                "Accept": "application/json",
                "User-Agent": "sherdlock-client",
            },
        )
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            try:
                raw = exc.read()
            finally:
                exc.close()
            raise self._error(exc.code, exc.headers.get("Retry-After"), raw) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ClientError(None, "unreachable", f"{self.api_root}: {reason}") from exc
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            raise ClientError(
                response.status,
                "bad_response",
                "the answer is not JSON: " + raw[:200].decode(errors="replace"),
            ) from None

    @staticmethod
    def _error(status: int, retry_header: str | None, raw: bytes) -> ClientError:
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            text = raw.decode(errors="replace").strip()[:200]
            return ClientError(status, "http_error", text or f"HTTP {status}")
        fields = body.get("fields") if isinstance(body.get("fields"), dict) else {}
        return ClientError(
            status,
            str(body.get("code") or "http_error"),
            str(body.get("detail") or f"HTTP {status}"),
            fields,
            _retry_after(retry_header, body),
            body,
        )
