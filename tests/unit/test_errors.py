"""The error hierarchy: messages, attributes and pickling."""

from __future__ import annotations

import pickle

import pytest

from sherdlock import (
    FundsLocked,
    InsufficientFunds,
    InvalidRequest,
    SelectionStats,
    SherdlockError,
    WalletKey,
)

KEY = WalletKey("alice", "USD")


def test_root_error_defaults_to_its_docstring():
    assert str(SherdlockError()) == "Token selection failed."
    assert str(InvalidRequest()) == "The selection request is malformed."
    assert isinstance(InvalidRequest("x"), ValueError)


@pytest.mark.parametrize(
    "error",
    [
        InsufficientFunds(KEY, 10, 4, stats=SelectionStats(fetches=2)),
        FundsLocked(KEY, 10, 4, retry_after=0.5, stats=SelectionStats(rounds=3)),
        InvalidRequest("quantity must be positive"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_survive_pickling(error):
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error)
    assert copy.__dict__ == error.__dict__
    assert isinstance(copy, SherdlockError)


def test_messages_name_the_wallet_and_amounts():
    message = str(FundsLocked(KEY, 10, 4, retry_after=0.25))
    assert "alice/USD" in message and "10" in message and "0.250" in message
    assert "available 4" in str(InsufficientFunds(KEY, 10, 4))
