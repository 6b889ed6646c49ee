"""Many replica processes select from the same wallets at once: never a double spend.

Each replica is a separate OS process with its own selector and cache, talking to the real
PostgreSQL test database. The default run is short; `-m slow` runs the long variants.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from decimal import Decimal
from operator import itemgetter
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import Sum

from locks.models import Selection, TokenLock
from tests.factories import make_tokens
from tests.helpers.invariants import check_invariants
from tests.helpers.processes import ROOT
from tokens import supply
from tokens.models import Token


def run_replicas(
    tmp_path: Path, env: dict[str, str], count: int, *, timeout: float = 240, **options: object
) -> list[dict]:
    """Start ``count`` replica processes, release them at once, and return their records."""
    go = tmp_path / "go"
    out = tmp_path / "records.jsonl"
    argv_options: list[str] = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        argv_options += [flag, *map(str, value)] if isinstance(value, list) else [flag, str(value)]
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.workers.replica",
                "--out",
                str(out),
                "--go",
                str(go),
                "--name",
                f"r{i}",
                "--seed",
                str(i),
                *argv_options,
            ],
            cwd=ROOT,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    go.touch()
    try:
        for process in processes:
            _, err = process.communicate(timeout=timeout)
            assert process.returncode == 0, err[-3000:]
    finally:
        for process in processes:
            process.kill() if process.poll() is None else None
    return [json.loads(line) for line in out.read_text().splitlines()]


def assert_never_held_twice(records: list[dict]) -> None:
    """No token was held by two selections at once, nor after it was spent.

    Read from the database's own rows (``tests.helpers.invariants``), stamped by the server's
    clock under the locks: the windows a replica records around its calls say nothing of a
    double grant that fell between them. The records only name what each replica got, which
    must be what its selection row holds.
    """
    rows = {s.tx_id: s for s in Selection.objects.all()}
    for record in records:
        if record["outcome"] == "selected":
            row = rows.get(record["tx_id"])
            assert row is not None, f"{record['tx_id']} got tokens but has no selection row"
            assert sorted(row.token_ids) == sorted(record["tokens"]), record["tx_id"]
    check_invariants()


def assert_books_balance(records: list[dict], issued: Decimal | Mapping[str, Decimal]) -> None:
    """Spent tokens were spent once, by their selection; value is conserved; nothing leaks.

    ``issued`` is the value issued in all, or per currency (then conserved per currency).
    """
    spent_by: dict[int, str] = {}
    for record in records:
        if record.get("action") == "spent":
            for token_id in record["tokens"]:
                assert token_id not in spent_by, f"token {token_id} spent twice"
                spent_by[token_id] = record["tx_id"]
    stored = dict(Token.objects.filter(pk__in=spent_by).values_list("pk", "spent_by"))
    assert stored == spent_by
    # Every spend paid its wallet back (payment + change), so unspent value is what was issued.
    if isinstance(issued, Mapping):
        assert sums(Token.objects.unspent(), "currency") == issued
    else:
        assert Token.objects.unspent().aggregate(s=Sum("quantity"))["s"] == issued
    assert not TokenLock.objects.filter(token__spent_at__isnull=True).exists(), "leaked locks"
    selected = [r for r in records if r["outcome"] == "selected"]
    assert Selection.objects.count() == len(selected)


def sums(tokens, *fields: str) -> dict:
    """The quantity of ``tokens`` summed per value of ``fields`` (a tuple of values if several)."""
    key = itemgetter(*fields)
    return {key(r): r["s"] for r in tokens.order_by().values(*fields).annotate(s=Sum("quantity"))}


# Each contention test runs briefly by default and at length with ``-m slow``.
SHORT_AND_LONG = pytest.mark.parametrize(
    "replicas,selections",
    [
        pytest.param(8, 12, id="short"),
        pytest.param(12, 80, id="long", marks=pytest.mark.slow),
    ],
)


def outcomes(records: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for record in records:
        counts[record["outcome"]] += 1
    return dict(counts)


@SHORT_AND_LONG
def test_hot_wallet(tmp_path, subprocess_env, replicas, selections):
    make_tokens(200, wallet="hot", quantity=10)
    records = run_replicas(
        tmp_path,
        subprocess_env,
        replicas,
        wallets=["hot"],
        selections=selections,
        min_quantity=1,
        max_quantity=40,
    )
    counts = outcomes(records)
    assert len(records) == replicas * selections
    assert counts.get("insufficient_funds", 0) == 0, counts  # supply (2000) always sufficed
    assert counts.get("funds_locked", 0) == 0, counts
    # Never more than 8 x 40 held at once: "funds locked" was never even answered.
    assert sum(r.get("retries", 0) for r in records) == 0
    assert_never_held_twice(records)
    assert_books_balance(records, Decimal(2000))


@SHORT_AND_LONG
def test_many_wallets(tmp_path, subprocess_env, replicas, selections):
    wallets = [f"w{i}" for i in range(20)]
    for wallet in wallets:
        make_tokens(20, wallet=wallet, quantity=5)
    records = run_replicas(
        tmp_path,
        subprocess_env,
        replicas,
        wallets=wallets,
        selections=selections,
        min_quantity=1,
        max_quantity=20,
    )
    counts = outcomes(records)
    assert counts.get("insufficient_funds", 0) == 0, counts
    assert counts.get("funds_locked", 0) == 0, counts
    assert_never_held_twice(records)
    assert_books_balance(records, Decimal(20 * 20 * 5))


@SHORT_AND_LONG
def test_hot_tokens(tmp_path, subprocess_env, replicas, selections):
    """Requests that a batch of small tokens cannot cover: short batches, then largest first.

    Most random batches hold no free token of 100, so the replicas keep falling back to the
    wallet's largest tokens, all at once, through the contested walk.
    """
    make_tokens(200, wallet="hot-tokens", quantity=1)
    make_tokens(8, wallet="hot-tokens", quantity=100)
    records = run_replicas(
        tmp_path,
        subprocess_env,
        replicas,
        wallets=["hot-tokens"],
        selections=selections,
        min_quantity=80,
        max_quantity=150,
    )
    counts = outcomes(records)
    assert len(records) == replicas * selections
    assert counts.get("insufficient_funds", 0) == 0, counts  # the supply (1000) always sufficed
    assert_never_held_twice(records)
    assert_books_balance(records, Decimal(1000))


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


# A lease short enough that a selection held past it is taken over during the test, long
# enough that one held as the others are (milliseconds) is spent well within it.
SHORT_LEASE = 0.4
TAKEN_OVER = """
SELECT count(*) FROM locks_selection a
JOIN locks_selection b ON b.token_ids && a.token_ids AND b.id <> a.id
WHERE b.created_at >= a.expires_at AND b.created_at < a.released_at
"""


@pytest.mark.parametrize(
    "replicas,selections",
    [
        pytest.param(6, 10, id="short"),
        pytest.param(10, 60, id="long", marks=pytest.mark.slow),
    ],
)
def test_leases_that_run_out_are_taken_over_and_their_holders_refused(
    tmp_path, subprocess_env, replicas, selections
):
    """Some replicas hold a selection past a short lease: the others take its tokens over while
    it still holds on, and its spend is refused. No token is held twice all the same."""
    make_tokens(30, wallet="short-lease", quantity=10)
    env = dict(subprocess_env, SHERDLOCK_LEASE_SECONDS=str(SHORT_LEASE))
    records = run_replicas(
        tmp_path,
        env,
        replicas,
        wallets=["short-lease"],
        selections=selections,
        min_quantity=10,
        max_quantity=60,
        overstay_ratio=0.3,
        overstay=3 * SHORT_LEASE,
    )
    overstayed = [r for r in records if r.get("overstayed")]
    assert overstayed
    # Each overstayed selection that tried to spend was refused, and let go.
    assert {r["action"] for r in overstayed} <= {"lease_lost", "released"}
    assert any(r["action"] == "lease_lost" for r in overstayed)
    # Others took tokens over while their holders still held on (released them later).
    with connection.cursor() as cursor:
        cursor.execute(TAKEN_OVER)
        assert cursor.fetchone()[0] > 0, "no lease was taken over during the run"
    assert_never_held_twice(records)
    assert_books_balance(records, Decimal(300))


@pytest.mark.parametrize(
    "selections",
    [
        pytest.param(10, id="short"),
        pytest.param(60, id="long", marks=pytest.mark.slow),
    ],
)
def test_livelock_of_the_seed_resolves(tmp_path, subprocess_env, selections):
    """Two tokens of 3, two replicas each asking 4, over and over: backoff breaks the tie."""
    make_tokens(2, wallet="pair", quantity=3)
    records = run_replicas(
        tmp_path,
        subprocess_env,
        2,
        wallets=["pair"],
        selections=selections,
        min_quantity=4,
        max_quantity=4,
        hold=0.003,
        spend_ratio=0,
        # Enough rounds that every selection ends holding both tokens, not funds_locked.
        backoff_attempts=30,
        backoff_max=0.03,
    )
    counts = outcomes(records)
    assert counts == {"selected": 2 * selections}, counts
    for record in records:
        assert len(record["tokens"]) == 2  # one replica took both tokens each time
    assert_never_held_twice(records)
    assert_books_balance(records, Decimal(6))
