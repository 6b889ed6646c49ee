"""The seed command loads tokens fast and can be run again safely."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Sum

from tokens.models import Token

pytestmark = pytest.mark.django_db


def seed(**options):
    out, err = StringIO(), StringIO()
    call_command("seed_tokens", stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def test_seed_creates_the_requested_tokens():
    out, _ = seed(
        wallets=3,
        tokens_per_wallet=50,
        currency="EUR",
        min_quantity=5,
        max_quantity=5,
        no_progress=True,
    )
    assert Token.objects.filter(currency="EUR").count() == 150
    assert set(Token.objects.values_list("wallet", flat=True)) == {
        "wallet-0",
        "wallet-1",
        "wallet-2",
    }
    assert Token.objects.aggregate(s=Sum("quantity"))["s"] == 750
    assert Token.objects.unspent().count() == 150
    assert "created 150 tokens" in out


def test_seed_runs_twice_without_identity_conflicts():
    seed(wallets=2, tokens_per_wallet=10, no_progress=True)
    seed(wallets=2, tokens_per_wallet=10, no_progress=True)
    assert Token.objects.count() == 40


def test_seed_spans_copy_chunks(monkeypatch, capsys):
    from tokens.management.commands import seed_tokens

    monkeypatch.setattr(seed_tokens, "CHUNK", 7)
    seed(wallets=2, tokens_per_wallet=10)
    assert Token.objects.count() == 20
    assert "20.0/20.0" in capsys.readouterr().err  # the progress bar reached the end


@pytest.mark.parametrize(
    "options",
    [
        {"wallets": 0},
        {"min_quantity": 0},
        {"min_quantity": 10, "max_quantity": 5},
        {"max_quantity": 2**64},
        {"currency": ""},
    ],
)
def test_seed_rejects_bad_options(options):
    with pytest.raises(CommandError):
        seed(no_progress=True, **options)
    assert not Token.objects.exists()
