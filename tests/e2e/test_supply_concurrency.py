"""Spends from several processes at once, with issues and a rolled-back spend meanwhile.

The per-currency supply summary is maintained only by issuing; this shows it still equals the
real sum of unspent tokens after replica processes spent concurrently (each spend creating a
payment and its change), while this process issued new tokens and rolled a spend back.
"""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest
from django.db import connection, transaction

from tests.factories import make_tokens
from tests.helpers.replicas import run_replicas
from tokens import supply
from tokens.models import Token
from tokens.services import TokenSpec, issue_tokens

pytestmark = pytest.mark.django_db(transaction=True)


def issue_and_roll_back(stop: threading.Event, done: list[str], errors: list[BaseException]):
    """Issue small batches until told to stop; once, spend and roll the transaction back."""
    from locks import replica
    from locks.services import release_selection, select_tokens, spend_selection

    try:
        rolled_back = False
        n = 0
        while not stop.is_set() or not rolled_back:
            issue_tokens([TokenSpec(f"mint-{n}", i, "w-new", "USD", 3) for i in range(5)])
            done.append(f"mint-{n}")
            n += 1
            if not rolled_back:
                selection, _ = select_tokens("undo", "w-new", "USD", 6)
                try:
                    with transaction.atomic():
                        spend_selection(
                            "undo", [TokenSpec("undo", 0, "w-x", "USD", int(selection.total))]
                        )
                        raise RuntimeError("roll back")
                except RuntimeError:
                    rolled_back = True
                release_selection("undo")
    except BaseException as exc:  # reported by the test, not lost in the thread
        errors.append(exc)
    finally:
        replica.reset()
        connection.close()


def test_the_summary_stays_exact_under_concurrent_spends(tmp_path, subprocess_env):
    make_tokens(150, wallet="w1", quantity=10)
    make_tokens(150, wallet="w2", quantity=10)
    assert supply.drift() == {}
    stop, minted, errors = threading.Event(), [], []
    issuer = threading.Thread(target=issue_and_roll_back, args=(stop, minted, errors))
    issuer.start()
    try:
        records = run_replicas(
            tmp_path,
            subprocess_env,
            4,
            wallets=["w1", "w2"],
            selections=12,
            spend_ratio=0.8,
            max_quantity=40,
        )
    finally:
        stop.set()
        issuer.join(timeout=120)
    assert not errors, errors
    spent = [r for r in records if r.get("action") == "spent"]
    assert spent, "no replica spent anything"
    assert Token.objects.filter(spent_by__in=[r["tx_id"] for r in spent]).exists()
    assert not Token.objects.filter(spent_by="undo").exists()
    assert supply.drift() == {}
    assert supply.summary() == {"USD": Decimal(3000 + 15 * len(minted))}
