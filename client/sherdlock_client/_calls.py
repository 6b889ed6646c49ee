"""Every endpoint as a call to send: its request, whether it is idempotent, how to read it.

The blocking and the asyncio clients both build their calls here and only send them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from . import _http
from ._http import Server, path_segment
from .errors import BadAnswer
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
    quantity,
)

T = TypeVar("T")

# The server may hold a select with ``wait`` this many seconds; the read timeout of such a
# call is stretched by it.
MAX_WAIT_SECONDS = 60


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request of the API and how its answer is read."""

    method: str
    target: str
    data: bytes
    # Repeating it after a lost answer is answered as the first one was (a tx id names it).
    idempotent: bool
    read: Callable[[int, Any], T]
    waits: float = 0.0  # seconds the server may hold it before answering
    retry_locked_for: float = 0.0

    def answer(self, answer: _http.Answer) -> T:
        """Return what the answer says, or raise the API's error."""
        data = _http.decode(answer)
        try:
            return self.read(answer.status, data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BadAnswer(f"unexpected answer to {self.method} {self.target}: {exc}") from None


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a listing and the target of the next (None on the last)."""

    items: tuple[T, ...]
    next: str | None


class Calls:
    """Build the calls of one server and API key."""

    def __init__(self, server: Server, api_key: str) -> None:
        self.server = server
        self._head = server.head(api_key)

    def _call(
        self,
        method: str,
        path: str,
        read: Callable[[int, Any], T],
        body: object = None,
        *,
        idempotent: bool = True,
        query: dict[str, Any] | None = None,
        waits: float = 0.0,
        retry_locked_for: float = 0.0,
    ) -> Call[T]:
        target = _http.target(self.server, path, query)
        data = _http.request(method, target, self._head, body)
        return Call(method, target, data, idempotent, read, waits, retry_locked_for)

    def issue(self, tokens: Iterable[NewToken]) -> Call[Issued]:
        # A repeat stores nothing new, but answers created=0: the first answer is not
        # repeated, so a lost one is not retried.
        body = {"tokens": [token.wire() for token in tokens]}
        return self._call("POST", "tokens/", _read(Issued.parse), body, idempotent=False)

    def select(
        self,
        tx_id: str,
        wallet: str,
        currency: str,
        amount: Quantity,
        *,
        strategy: Strategy = DEFAULT_STRATEGY,
        wait: int = 0,
        retry_locked_for: float = 0.0,
    ) -> Call[Selection]:
        body: dict[str, Any] = {
            "tx_id": tx_id,
            "wallet": wallet,
            "currency": currency,
            "quantity": quantity(amount),
            **strategy.terms(),
        }
        if wait:
            body["wait"] = int(wait)
        return self._call(
            "POST",
            "selections/",
            _read_selection,
            body,
            waits=min(max(int(wait), 0), MAX_WAIT_SECONDS),
            retry_locked_for=retry_locked_for,
        )

    def select_legs(
        self,
        tx_id: str,
        wallet: str,
        legs: Mapping[str, Quantity] | Iterable[tuple[str, Quantity]],
        *,
        strategy: Strategy = DEFAULT_STRATEGY,
        retry_locked_for: float = 0.0,
    ) -> Call[Selection]:
        pairs = legs.items() if isinstance(legs, Mapping) else legs
        body = {
            "tx_id": tx_id,
            "wallet": wallet,
            "legs": [{"currency": c, "quantity": quantity(q)} for c, q in pairs],
            **strategy.terms(),
        }
        return self._call(
            "POST", "selections/", _read_selection, body, retry_locked_for=retry_locked_for
        )

    def spend(self, tx_id: str, outputs: Iterable[Output]) -> Call[Spent]:
        body = {"outputs": [output.wire() for output in outputs]}
        return self._call(
            "POST", f"selections/{path_segment(tx_id)}/spend/", _read(Spent.parse), body
        )

    def release(self, tx_id: str) -> Call[Selection]:
        return self._call(
            "POST", f"selections/{path_segment(tx_id)}/release/", _read(Selection.parse), {}
        )

    def extend(self, tx_id: str, seconds: int | None = None) -> Call[Selection]:
        body = {} if seconds is None else {"seconds": int(seconds)}
        return self._call(
            "POST", f"selections/{path_segment(tx_id)}/extend/", _read(Selection.parse), body
        )

    def selection(self, tx_id: str) -> Call[Selection]:
        return self._call("GET", f"selections/{path_segment(tx_id)}/", _read(Selection.parse))

    def balances(self, wallet: str, currency: str | None = None) -> Call[Balances]:
        return self._call(
            "GET",
            f"wallets/{path_segment(wallet)}/balances/",
            _read(Balances.parse),
            query={"currency": currency},
        )

    def selections(
        self,
        wallet: str | None = None,
        currency: str | None = None,
        status: str | None = None,
        page_size: int | None = None,
    ) -> Call[Page[Selection]]:
        query = {"wallet": wallet, "currency": currency, "status": status, "page_size": page_size}
        return self._call("GET", "selections/", _page(Selection.parse), query=query)

    def locks(
        self,
        wallet: str | None = None,
        currency: str | None = None,
        spender_tx_id: str | None = None,
        state: str | None = None,
        page_size: int | None = None,
    ) -> Call[Page[Lock]]:
        query = {
            "wallet": wallet,
            "currency": currency,
            "spender_tx_id": spender_tx_id,
            "state": state,
            "page_size": page_size,
        }
        return self._call("GET", "locks/", _page(Lock.parse), query=query)

    def tokens(
        self,
        wallet: str | None = None,
        currency: str | None = None,
        spent: bool | None = None,
        page_size: int | None = None,
    ) -> Call[Page[Token]]:
        flag = None if spent is None else ("true" if spent else "false")
        query = {"wallet": wallet, "currency": currency, "spent": flag, "page_size": page_size}
        return self._call("GET", "tokens/", _page(Token.parse), query=query)

    def alive(self) -> Call[bool]:
        # The probe lives at the server's root, beside /api/v1/.
        target = self.server.root.removesuffix(_http.API_PREFIX) + "/healthz"
        data = _http.request("GET", target, self._head)
        return Call("GET", target, data, True, _read_ok)

    def next_page(self, call: Call[Page[T]], target: str) -> Call[Page[T]]:
        """Return ``call`` for the page at ``target`` (a listing's ``next``)."""
        data = _http.request("GET", target, self._head)
        return Call("GET", target, data, True, call.read)


def _read(parse: Callable[[dict[str, Any]], T]) -> Callable[[int, Any], T]:
    def read(status: int, data: Any) -> T:
        return parse(data)

    return read


def _read_ok(status: int, data: Any) -> bool:
    return status == 200


def _read_selection(status: int, data: Any) -> Selection:
    # 201: this call made the selection; 200: it repeats an earlier identical one.
    return Selection.parse(data, created=status == 201)


def _page(parse: Callable[[dict[str, Any]], T]) -> Callable[[int, Any], Page[T]]:
    def read(status: int, data: Any) -> Page[T]:
        following = data.get("next")
        return Page(
            tuple(parse(item) for item in data["results"]),
            _http.follow(following) if isinstance(following, str) else None,
        )

    return read
