"""The per-currency supply summary always equals the real sum of unspent tokens.

Issuing adds to it in the statement that inserts the tokens; nothing on the selection path
(select, lock, spend, release, extend) touches it, and a spend, which conserves value within
its currency, leaves it right by itself. Concurrent spends from several processes are in
``tests/e2e/test_supply_concurrency.py``.
"""

from __future__ import annotations

import importlib
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from locks import replica as replica_module
from locks.errors import OutputConflict, ValueNotConserved
from locks.services import extend_selection, release_selection, select_tokens, spend_selection
from tests.factories import make_token, make_tokens
from tokens import supply
from tokens.models import CurrencySupply, Token
from tokens.services import TokenConflict, TokenSpec, issue_tokens

pytestmark = pytest.mark.django_db

SUMMARY_TABLE = CurrencySupply._meta.db_table


@pytest.fixture(autouse=True)
def replica():
    replica_module.reset()
    yield
    replica_module.reset()


def exact() -> dict[str, Decimal]:
    """Assert the summary equals a recount of the tokens; return it."""
    assert supply.drift() == {}
    assert {c: v for c, v in supply.summary().items() if v} == supply.recount()
    return supply.recount()


def spec(tx_id: str, index: int, wallet: str, quantity: int, currency: str = "USD"):
    return TokenSpec(tx_id, index, wallet, currency, quantity)


def test_issuing_adds_exactly_what_is_new_and_a_refused_issue_adds_nothing():
    issue_tokens(
        [
            spec("m1", 0, "alice", 60),
            spec("m1", 1, "alice", 40),
            spec("m1", 2, "bob", 7, currency="EUR"),
        ]
    )
    assert exact() == {"USD": 100, "EUR": 7}
    _, new = issue_tokens([spec("m1", 0, "alice", 60), spec("m2", 0, "carol", 5)])
    assert new == 1 and exact() == {"USD": 105, "EUR": 7}  # the re-sent token counts once
    with pytest.raises(TokenConflict):
        issue_tokens([spec("m3", 0, "dave", 1000), spec("m1", 1, "alice", 41)])
    assert exact() == {"USD": 105, "EUR": 7}
    assert not Token.objects.filter(tx_id="m3").exists()


def test_spends_leave_it_exact_and_a_rolled_back_spend_changes_nothing():
    issue_tokens([spec("m", i, "alice", 10) for i in range(10)])
    selection, _ = select_tokens("pay-1", "alice", "USD", 25)
    change = int(selection.total) - 25
    spend_selection("pay-1", [spec("pay-1", 0, "bob", 25), spec("pay-1", 1, "alice", change)])
    assert exact() == {"USD": 100}

    second, _ = select_tokens("pay-2", "alice", "USD", 30)
    total = int(second.total)
    with pytest.raises(RuntimeError), transaction.atomic():
        spend_selection("pay-2", [spec("pay-2", 0, "bob", total)])
        assert Token.objects.filter(spent_by="pay-2").exists()  # spent inside the transaction
        raise RuntimeError("the caller's transaction fails after the spend")
    assert not Token.objects.filter(spent_by="pay-2").exists()
    assert exact() == {"USD": 100}

    make_token(wallet="bob", tx_id="pay-2", index=0)  # an output that already exists
    with pytest.raises(OutputConflict):  # inputs were marked spent, then everything rolled back
        spend_selection("pay-2", [spec("pay-2", 0, "bob", total)])
    with pytest.raises(ValueNotConserved):
        spend_selection("pay-2", [spec("pay-2", 0, "bob", total, currency="EUR")])
    assert exact() == {"USD": 110}
    release_selection("pay-2")
    assert exact() == {"USD": 110}


def test_the_selection_path_never_touches_the_summary():
    issue_tokens([spec("m", i, "alice", 10) for i in range(6)])
    with CaptureQueriesContext(connection) as captured:
        selection, _ = select_tokens("pay-1", "alice", "USD", 15)
        extend_selection("pay-1", 30)
        spend_selection("pay-1", [spec("pay-1", 0, "bob", int(selection.total))])
        select_tokens("pay-2", "alice", "USD", 10)
        release_selection("pay-2")
    assert captured.captured_queries
    assert not [q["sql"] for q in captured.captured_queries if SUMMARY_TABLE in q["sql"]]
    with connection.cursor() as cursor:  # and no trigger does it behind their back
        cursor.execute(
            "SELECT t.tgname FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid "
            "WHERE NOT t.tgisinternal AND p.prosrc ILIKE %s",
            [f"%{SUMMARY_TABLE}%"],
        )
        assert cursor.fetchall() == []
    assert exact() == {"USD": 60}


def test_seeding_adds_each_chunk_with_its_tokens():
    call_command(
        "seed_tokens",
        wallets=3,
        tokens_per_wallet=50,
        currency="CHF",
        no_progress=True,
        stdout=StringIO(),
    )
    seeded = Token.objects.filter(currency="CHF").aggregate(s=Sum("quantity"))["s"]
    assert seeded > 0 and exact() == {"CHF": seeded}


def test_the_token_admin_keeps_it_exact(admin_client):
    add = admin_client.post(
        reverse("admin:tokens_token_add"),
        {
            "tx_id": "hand",
            "index": 0,
            "wallet": "alice",
            "currency": "USD",
            "quantity": 70,
            "spent_by": "",
            "spent_at_0": "",
            "spent_at_1": "",
        },
    )
    assert add.status_code == 302
    assert exact() == {"USD": 70}
    token = Token.objects.get(tx_id="hand")
    others = make_tokens(3, wallet="bob", quantity=5)
    response = admin_client.post(
        reverse("admin:tokens_token_changelist"),
        {
            "action": "delete_selected",
            "_selected_action": [t.pk for t in others[:2]],
            "post": "yes",
        },
    )
    assert response.status_code == 302 and Token.objects.filter(wallet="bob").count() == 1
    assert exact() == {"USD": 75}
    response = admin_client.post(
        reverse("admin:tokens_token_delete", args=[token.pk]), {"post": "yes"}
    )
    assert response.status_code == 302
    assert exact() == {"USD": 5}


def test_the_token_admin_counts_a_token_marked_spent_by_hand(admin_client):
    token = make_token(wallet="alice", quantity=30)
    make_token(wallet="alice", quantity=12)
    url = reverse("admin:tokens_token_change", args=[token.pk])
    now = timezone.now()
    response = admin_client.post(
        url,
        {"spent_by": "manual", "spent_at_0": f"{now:%Y-%m-%d}", "spent_at_1": f"{now:%H:%M:%S}"},
    )
    token.refresh_from_db()
    if token.spent_at is None:  # spent fields are read-only here: nothing can change
        assert response.status_code in (200, 302)
    assert exact() == {"USD": 12 if token.spent_at else 42}


def test_the_migration_fills_it_from_the_tokens_already_there():
    make_tokens(4, currency="USD", quantity=25)
    make_tokens(3, currency="EUR", quantity=2)
    make_token(currency="EUR", quantity=1000, spent_by="x", spent_at=timezone.now())
    migration = importlib.import_module("tokens.migrations.0004_currency_supply")
    CurrencySupply.objects.all().delete()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(migration.FILL)
    assert exact() == {"USD": 100, "EUR": 6}


def test_the_command_finds_a_drift_and_rebuilds():
    make_tokens(2, quantity=8)
    out = StringIO()
    call_command("supply", stdout=out)
    assert "USD\t16" in out.getvalue() and "matches" in out.getvalue()
    Token.objects.create(tx_id="raw", index=0, wallet="z", currency="USD", quantity=4)
    CurrencySupply.objects.create(currency="GBP", supply=3)
    with pytest.raises(CommandError, match="rebuild"):
        call_command("supply", stdout=StringIO(), stderr=(err := StringIO()))
    assert "USD: summary 16, tokens 20" in err.getvalue()
    assert "GBP: summary 3, tokens 0" in err.getvalue()
    call_command("supply", "--rebuild", stdout=StringIO())
    assert exact() == {"USD": 20}
    assert supply.summary() == {"USD": 20}
