"""Select and lock tokens across replicas without handing a token to two transactions."""

from .cache import TokenCache
from .config import BackoffPolicy, SelectorConfig
from .errors import (
    ClaimRefused,
    FundsLocked,
    InsufficientFunds,
    InvalidRequest,
    NoExactMatch,
    NoMatch,
    SelectionTooLarge,
    SherdlockError,
    TooManyInputs,
)
from .interfaces import Clock, Sleeper, TokenStore
from .legs import MAX_LEGS, Leg, select_legs
from .memory import InMemoryStore
from .selector import Selector
from .strategies import STRATEGIES, Strategy
from .types import (
    MAX_QUANTITY,
    Candidate,
    Claim,
    FetchResult,
    LockOutcome,
    Selection,
    SelectionStats,
    Supply,
    WalletKey,
)

__all__ = [
    "MAX_LEGS",
    "MAX_QUANTITY",
    "STRATEGIES",
    "BackoffPolicy",
    "Candidate",
    "Claim",
    "ClaimRefused",
    "Clock",
    "FetchResult",
    "FundsLocked",
    "InMemoryStore",
    "InsufficientFunds",
    "InvalidRequest",
    "Leg",
    "LockOutcome",
    "NoExactMatch",
    "NoMatch",
    "Selection",
    "SelectionStats",
    "SelectionTooLarge",
    "Selector",
    "SelectorConfig",
    "SherdlockError",
    "Sleeper",
    "Strategy",
    "Supply",
    "TokenCache",
    "TokenStore",
    "TooManyInputs",
    "WalletKey",
    "select_legs",
]
