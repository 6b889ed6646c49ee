"""What the API answers and what a caller sends, as frozen dataclasses with exact quantities.

Quantities are whole minor units up to 2**64-1: ``int`` here, decimal strings on the wire
(a JSON number loses precision above 2**53).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

Quantity = int | str | Decimal


def quantity(value: Quantity) -> str:
    """Return ``value`` as the API's decimal string; refuse fractions and non-numbers."""
    if isinstance(value, bool):
        raise TypeError("a quantity is a whole number, not a bool")
    if isinstance(value, int):
        whole = value
    elif isinstance(value, str | Decimal):
        number = Decimal(value)
        if not number.is_finite() or number != number.to_integral_value():
            raise ValueError(f"quantities are whole numbers, got {value!r}")
        whole = int(number)
    else:
        raise TypeError(f"a quantity is an int, a str or a Decimal, not {type(value).__name__}")
    if whole < 0:
        raise ValueError(f"quantities are not negative, got {value!r}")
    return str(whole)


def _amount(value: Any) -> int:
    if type(value) is str and value.isascii() and value.isdigit():
        return int(value)
    raise ValueError(f"not a quantity: {value!r}")


def _time(value: Any) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _int(value: Any) -> int:
    if type(value) is not int:
        raise ValueError(f"not an integer: {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Strategy:
    """How the server picks the tokens of a selection.

    ``random`` (default), ``smallest_first``, ``fewest_tokens``; ``exact`` with ``max_change``
    and ``fallback``; ``consolidate`` with ``max_tokens``.
    """

    name: str = "random"
    max_change: int | None = None
    max_tokens: int | None = None
    fallback: bool = False

    @classmethod
    def exact(cls, max_change: int = 0, *, fallback: bool = False) -> Strategy:
        """Return the strategy that locks a total within ``max_change`` of the quantity."""
        return cls("exact", max_change=max_change, fallback=fallback)

    @classmethod
    def consolidate(cls, max_tokens: int | None = None) -> Strategy:
        """Return the strategy that locks the smallest tokens, up to ``max_tokens``."""
        return cls("consolidate", max_tokens=max_tokens)

    def terms(self) -> dict[str, Any]:
        """Return the body keys of a selection request that name this strategy."""
        if self == DEFAULT_STRATEGY:
            return {}
        terms: dict[str, Any] = {"strategy": self.name}
        if self.max_change is not None:
            terms["max_change"] = quantity(self.max_change)
        if self.max_tokens is not None:
            terms["max_tokens"] = int(self.max_tokens)
        if self.fallback:
            terms["fallback"] = True
        return terms


DEFAULT_STRATEGY = Strategy()


@dataclass(frozen=True, slots=True)
class Output:
    """A token a spend creates: output ``index`` of the spending transaction."""

    index: int
    wallet: str
    currency: str
    quantity: Quantity

    def wire(self) -> dict[str, Any]:
        """Return the request's form of this output."""
        return {
            "index": self.index,
            "wallet": self.wallet,
            "currency": self.currency,
            "quantity": quantity(self.quantity),
        }


@dataclass(frozen=True, slots=True)
class NewToken:
    """A token to issue: output ``index`` of transaction ``tx_id``."""

    tx_id: str
    index: int
    wallet: str
    currency: str
    quantity: Quantity

    def wire(self) -> dict[str, Any]:
        """Return the request's form of this token."""
        return {
            "tx_id": self.tx_id,
            "index": self.index,
            "wallet": self.wallet,
            "currency": self.currency,
            "quantity": quantity(self.quantity),
        }


@dataclass(frozen=True, slots=True)
class SelectedToken:
    """A token a selection holds (or held)."""

    tx_id: str
    index: int
    quantity: int

    @classmethod
    def parse(cls, data: dict[str, Any]) -> SelectedToken:
        """Read the answer's form."""
        return cls(str(data["tx_id"]), _int(data["index"]), _amount(data["quantity"]))


@dataclass(frozen=True, slots=True)
class Leg:
    """One currency of a multi-currency selection: what it asked and what it holds."""

    currency: str
    quantity: int
    total: int
    change: int
    tokens: tuple[SelectedToken, ...]

    @classmethod
    def parse(cls, data: dict[str, Any]) -> Leg:
        """Read the answer's form."""
        return cls(
            str(data["currency"]),
            _amount(data["quantity"]),
            _amount(data["total"]),
            _amount(data["change"]),
            tuple(SelectedToken.parse(token) for token in data["tokens"]),
        )


@dataclass(frozen=True, slots=True)
class OutputToken:
    """A token a spend created."""

    tx_id: str
    index: int
    wallet: str
    currency: str
    quantity: int

    @classmethod
    def parse(cls, data: dict[str, Any]) -> OutputToken:
        """Read the answer's form."""
        return cls(
            str(data["tx_id"]),
            _int(data["index"]),
            str(data["wallet"]),
            str(data["currency"]),
            _amount(data["quantity"]),
        )


@dataclass(frozen=True, slots=True)
class Selection:
    """A selection: the tokens locked for a transaction, and where it stands.

    ``status`` is locked, spent, released, expired or lost; ``legs`` is None for one currency
    (``currency``, ``quantity`` and ``total`` are then the first leg's, ``tokens`` all of them).
    ``created`` is true when this call made it, false when it repeated an earlier one (and
    for answers that are not a select's).
    """

    tx_id: str
    wallet: str
    currency: str
    quantity: int
    total: int
    change: int
    inputs: int
    strategy: str
    tokens: tuple[SelectedToken, ...]
    legs: tuple[Leg, ...] | None
    status: str
    fence: int | None
    created_at: datetime | None
    expires_at: datetime | None
    spent_at: datetime | None
    released_at: datetime | None
    created: bool = False

    @classmethod
    def parse(cls, data: dict[str, Any], created: bool = False) -> Selection:
        """Read the answer's form."""
        return cls(**_selection_fields(data), created=created)


def _selection_fields(data: dict[str, Any]) -> dict[str, Any]:
    legs = data.get("legs")
    fence = data.get("fence")
    return {
        "tx_id": str(data["tx_id"]),
        "wallet": str(data["wallet"]),
        "currency": str(data["currency"]),
        "quantity": _amount(data["quantity"]),
        "total": _amount(data["total"]),
        "change": _amount(data["change"]),
        "inputs": _int(data["inputs"]),
        "strategy": str(data["strategy"]),
        "tokens": tuple(SelectedToken.parse(token) for token in data["tokens"]),
        "legs": None if legs is None else tuple(Leg.parse(leg) for leg in legs),
        "status": str(data["status"]),
        "fence": None if fence is None else _int(fence),
        "created_at": _time(data.get("created_at")),
        "expires_at": _time(data.get("expires_at")),
        "spent_at": _time(data.get("spent_at")),
        "released_at": _time(data.get("released_at")),
    }


@dataclass(frozen=True, slots=True)
class Spent:
    """A spent selection and the outputs its spend created."""

    selection: Selection
    outputs: tuple[OutputToken, ...]

    @classmethod
    def parse(cls, data: dict[str, Any]) -> Spent:
        """Read the answer's form."""
        return cls(
            Selection(**_selection_fields(data)),
            tuple(OutputToken.parse(token) for token in data["outputs"]),
        )


@dataclass(frozen=True, slots=True)
class Token:
    """A stored token."""

    tx_id: str
    index: int
    wallet: str
    currency: str
    quantity: int
    created_at: datetime | None
    spent: bool
    spent_by: str | None
    spent_at: datetime | None

    @classmethod
    def parse(cls, data: dict[str, Any]) -> Token:
        """Read the answer's form."""
        spent_by = data.get("spent_by")
        return cls(
            str(data["tx_id"]),
            _int(data["index"]),
            str(data["wallet"]),
            str(data["currency"]),
            _amount(data["quantity"]),
            _time(data.get("created_at")),
            bool(data["spent"]),
            None if spent_by is None else str(spent_by),
            _time(data.get("spent_at")),
        )


@dataclass(frozen=True, slots=True)
class Issued:
    """What an issue stored: every token of the request, and how many were new."""

    created: int
    tokens: tuple[Token, ...]

    @classmethod
    def parse(cls, data: dict[str, Any]) -> Issued:
        """Read the answer's form."""
        return cls(_int(data["created"]), tuple(Token.parse(token) for token in data["tokens"]))


@dataclass(frozen=True, slots=True)
class Balance:
    """A wallet's quantities in one currency: ``available`` is ``unspent - locked``."""

    currency: str
    unspent: int
    locked: int
    available: int

    @classmethod
    def parse(cls, data: dict[str, Any]) -> Balance:
        """Read the answer's form."""
        return cls(
            str(data["currency"]),
            _amount(data["unspent"]),
            _amount(data["locked"]),
            _amount(data["available"]),
        )


@dataclass(frozen=True, slots=True)
class Balances:
    """A wallet's balances, one per currency it holds unspent tokens in."""

    wallet: str
    balances: tuple[Balance, ...]

    def __getitem__(self, currency: str) -> Balance:
        """Return the balance in ``currency`` (zero when the wallet holds none)."""
        for balance in self.balances:
            if balance.currency == currency:
                return balance
        return Balance(currency, 0, 0, 0)

    @classmethod
    def parse(cls, data: dict[str, Any]) -> Balances:
        """Read the answer's form."""
        return cls(str(data["wallet"]), tuple(Balance.parse(row) for row in data["balances"]))


@dataclass(frozen=True, slots=True)
class Lock:
    """A row of the lock table: ``token`` (``tx_id:index``) held for ``spender_tx_id``."""

    token: str
    wallet: str
    currency: str
    quantity: int
    spender_tx_id: str
    fence: int | None
    created_at: datetime | None
    expires_at: datetime | None
    state: str

    @classmethod
    def parse(cls, data: dict[str, Any]) -> Lock:
        """Read the answer's form."""
        fence = data.get("fence")
        return cls(
            str(data["token"]),
            str(data["wallet"]),
            str(data["currency"]),
            _amount(data["quantity"]),
            str(data["spender_tx_id"]),
            None if fence is None else _int(fence),
            _time(data.get("created_at")),
            _time(data.get("expires_at")),
            str(data["state"]),
        )
