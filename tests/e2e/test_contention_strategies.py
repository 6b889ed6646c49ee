"""Replica processes selecting with every strategy at once, and with legs, on shared wallets.

Each holds only what it returns, a selection of legs takes all of them or none, and no token is
held twice. The default run is short; `-m slow` runs the long variants.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from decimal import Decimal

from locks.models import Selection, TokenLock
from tests.factories import make_tokens
from tests.helpers.replicas import (
    SHORT_AND_LONG,
    assert_books_balance,
    assert_never_held_twice,
    outcomes,
    run_replicas,
    sums,
)
from tokens import supply
from tokens.models import Token

STRATEGY_MIX = ["random", "smallest_first", "fewest_tokens", "exact", "consolidate"]
# Tokens of 5, 1 and 25 (worth 260) in each currency of each shared wallet.
SHARED = [(30, 5), (10, 1), (4, 25)]
PER_WALLET = sum(count * quantity for count, quantity in SHARED)


def seed_shared(wallets: list[str], currencies: Iterable[str] = ("USD",)) -> None:
    for wallet in wallets:
        for currency in currencies:
            for count, quantity in SHARED:
                make_tokens(count, wallet=wallet, currency=currency, quantity=quantity)


def mix(wallets: list[str], selections: int) -> dict[str, object]:
    """Replica options drawing every strategy, for 1 to 20 at a time, on ``wallets``.

    Spends pay in tokens of at most 5, so exact always finds a set in a long run too.
    """
    return dict(
        wallets=wallets,
        selections=selections,
        min_quantity=1,
        max_quantity=20,
        strategies=STRATEGY_MIX,
        denomination=5,
    )


def assert_rows_hold_what_was_returned(records: list[dict]) -> None:
    """Each selection row holds the tokens its replica got, leg by leg, on its strategy's terms.

    A row with legs holds tokens of every leg's currency and of no other, each leg's tokens
    summing to its total.
    """
    by_tx = {r["tx_id"]: r for r in records if r["outcome"] == "selected"}
    ids = [t for r in by_tx.values() for t in r["tokens"]]
    rows = Token.objects.filter(pk__in=ids).values_list("pk", "currency", "quantity")
    tokens = {pk: (currency, quantity) for pk, currency, quantity in rows}
    for selection in Selection.objects.all():
        record = by_tx[selection.tx_id]
        assert selection.strategy == record["strategy"]
        assert sorted(selection.token_ids) == sorted(record["tokens"])
        asked = record.get("legs") or {record["currency"]: record["quantity"]}
        legs = selection.legs or [
            {
                "currency": selection.currency,
                "quantity": selection.quantity,
                "total": selection.total,
            }
        ]
        held = defaultdict(list)
        for token_id in selection.token_ids:
            currency, quantity = tokens[token_id]
            held[currency].append(quantity)
        assert sorted(held) == [leg["currency"] for leg in legs] == sorted(asked)
        for leg in legs:
            mine, total = held[leg["currency"]], Decimal(leg["total"])
            assert Decimal(leg["quantity"]) == asked[leg["currency"]] <= total == sum(mine)
            assert total == record["totals"][leg["currency"]]
            if record["strategy"] == "exact":
                assert total - Decimal(leg["quantity"]) <= 4
            if record["strategy"] == "consolidate":
                assert len(mine) <= 6


@SHORT_AND_LONG
def test_a_mix_of_strategies_on_shared_wallets(tmp_path, subprocess_env, replicas, selections):
    """Every strategy at once on the same wallets: each holds only what it returns."""
    wallets = ["m0", "m1", "m2"]
    seed_shared(wallets)
    records = run_replicas(tmp_path, subprocess_env, replicas, **mix(wallets, selections))
    counts = outcomes(records)
    assert counts.get("insufficient_funds", 0) == 0, counts
    assert counts.get("no_match", 0) == 0, [r for r in records if r["outcome"] == "no_match"]
    assert {r["strategy"] for r in records} == set(STRATEGY_MIX)
    assert_never_held_twice(records)
    assert_books_balance(records, Decimal(3 * PER_WALLET))
    assert_rows_hold_what_was_returned(records)


@SHORT_AND_LONG
def test_multi_currency_legs_among_a_mix_of_strategies(
    tmp_path, subprocess_env, replicas, selections
):
    """Selections of EUR and USD at once, all legs or none, amid every strategy in either.

    Some requests ask their last leg (USD) more than a wallet holds: their EUR leg is locked
    first and must be let go, leaving no lock, no row and no output. Every spend of legs first
    tries to move a unit of value between currencies, which must be refused.
    """
    wallets, currencies = ["m0", "m1", "m2"], ["EUR", "USD"]
    seed_shared(wallets, currencies)
    records = run_replicas(
        tmp_path,
        subprocess_env,
        replicas,
        **mix(wallets, selections),
        currencies=currencies,
        legs_ratio=0.5,
        oversized_ratio=0.2,
        oversized_quantity=PER_WALLET + 1,
    )
    legs = [r for r in records if "legs" in r]
    doomed = [r for r in legs if "oversized" in r]
    failed = [r for r in records if r["outcome"] != "selected"]
    # Every kind of request was made.
    assert {r["strategy"] for r in records} == set(STRATEGY_MIX)
    assert {r["currency"] for r in records if "legs" not in r} == set(currencies)
    assert doomed and any(r["outcome"] == "selected" and r.get("action") == "spent" for r in legs)
    assert_never_held_twice(records)
    issued = {currency: Decimal(3 * PER_WALLET) for currency in currencies}
    assert_books_balance(records, issued)
    assert supply.drift() == {}
    # Value conserved per wallet and currency, and per spend and currency.
    unspent = sums(Token.objects.unspent(), "wallet", "currency")
    assert unspent == {(w, c): Decimal(PER_WALLET) for w in wallets for c in currencies}
    spent = [r for r in records if r.get("action") == "spent"]
    totals = {(r["tx_id"], c): Decimal(t) for r in spent for c, t in r["totals"].items()}
    tx_ids = [r["tx_id"] for r in spent]
    assert sums(Token.objects.filter(spent_by__in=tx_ids), "spent_by", "currency") == totals
    assert sums(Token.objects.filter(tx_id__in=tx_ids), "tx_id", "currency") == totals
    shifts = [r["shift"] for r in spent if "shift" in r]
    assert shifts and set(shifts) == {"refused"}
    # Only the oversized requests failed, for want of USD, and all or none: they left no
    # selection, lock or output behind.
    assert failed == doomed, outcomes(records)
    assert {(r["outcome"], r["leg"]) for r in doomed} == {("insufficient_funds", "USD")}
    tx_ids = [r["tx_id"] for r in failed]
    assert not Selection.objects.filter(tx_id__in=tx_ids).exists()
    assert not TokenLock.objects.filter(spender_tx_id__in=tx_ids).exists()
    assert not Token.objects.filter(tx_id__in=tx_ids).exists()
    assert_rows_hold_what_was_returned(records)
