"""Many replica processes select from the same wallets at once: never a double spend.

Each replica is a separate OS process with its own selector and cache, talking to the real
PostgreSQL test database. The default run is short; `-m slow` runs the long variants.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from decimal import Decimal
from itertools import pairwise
from pathlib import Path

import pytest
from django.db.models import Sum

from locks.models import Selection, TokenLock
from tests.factories import make_tokens
from tests.helpers.processes import ROOT
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
    """No token was in two selections whose holding intervals overlap."""
    intervals = defaultdict(list)
    for record in records:
        if record["outcome"] == "selected":
            for token_id in record["tokens"]:
                intervals[token_id].append(
                    (record["acquired"], record["released_at"], record["tx_id"])
                )
    for token_id, spans in intervals.items():
        spans.sort()
        for (_, end, first), (start, _, second) in pairwise(spans):
            assert start >= end, f"token {token_id} held by {first} and {second} at once"


def assert_books_balance(records: list[dict], issued: Decimal) -> None:
    """Spent tokens were spent once, by their selection; value is conserved; nothing leaks."""
    spent_by: dict[int, str] = {}
    for record in records:
        if record.get("action") == "spent":
            for token_id in record["tokens"]:
                assert token_id not in spent_by, f"token {token_id} spent twice"
                spent_by[token_id] = record["tx_id"]
    stored = dict(Token.objects.filter(pk__in=spent_by).values_list("pk", "spent_by"))
    assert stored == spent_by
    # Every spend paid its wallet back (payment + change), so unspent value is what was issued.
    assert Token.objects.unspent().aggregate(s=Sum("quantity"))["s"] == issued
    assert not TokenLock.objects.filter(token__spent_at__isnull=True).exists(), "leaked locks"
    selected = [r for r in records if r["outcome"] == "selected"]
    assert Selection.objects.count() == len(selected)


def outcomes(records: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for record in records:
        counts[record["outcome"]] += 1
    return dict(counts)


@pytest.mark.parametrize(
    "replicas,selections",
    [
        pytest.param(8, 12, id="short"),
        pytest.param(12, 80, id="long", marks=pytest.mark.slow),
    ],
)
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


@pytest.mark.parametrize(
    "replicas,selections",
    [
        pytest.param(8, 12, id="short"),
        pytest.param(12, 80, id="long", marks=pytest.mark.slow),
    ],
)
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


STRATEGY_MIX = ["random", "smallest_first", "fewest_tokens", "exact", "consolidate"]


@pytest.mark.parametrize(
    "replicas,selections",
    [
        pytest.param(8, 12, id="short"),
        pytest.param(12, 80, id="long", marks=pytest.mark.slow),
    ],
)
def test_a_mix_of_strategies_on_shared_wallets(tmp_path, subprocess_env, replicas, selections):
    """Every strategy at once on the same wallets: each holds only what it returns."""
    wallets = ["m0", "m1", "m2"]
    for wallet in wallets:
        make_tokens(30, wallet=wallet, quantity=5)
        make_tokens(10, wallet=wallet, quantity=1)
        make_tokens(4, wallet=wallet, quantity=25)
    records = run_replicas(
        tmp_path,
        subprocess_env,
        replicas,
        wallets=wallets,
        selections=selections,
        min_quantity=1,
        max_quantity=20,
        strategies=STRATEGY_MIX,
    )
    counts = outcomes(records)
    assert counts.get("insufficient_funds", 0) == 0, counts
    assert counts.get("no_match", 0) == 0, [r for r in records if r["outcome"] == "no_match"]
    assert {r["strategy"] for r in records} == set(STRATEGY_MIX)
    assert_never_held_twice(records)
    assert_books_balance(records, Decimal(3 * (150 + 10 + 100)))
    by_tx = {r["tx_id"]: r for r in records if r["outcome"] == "selected"}
    for selection in Selection.objects.all():
        record = by_tx[selection.tx_id]
        assert selection.strategy == record["strategy"]
        assert sorted(selection.token_ids) == sorted(record["tokens"])
        if record["strategy"] == "exact":
            assert selection.total - selection.quantity <= 4
        if record["strategy"] == "consolidate":
            assert len(selection.token_ids) <= 6


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
    env = dict(subprocess_env, SHERDLOCK_BACKOFF_ATTEMPTS="30", SHERDLOCK_BACKOFF_MAX="0.03")
    records = run_replicas(
        tmp_path,
        env,
        2,
        wallets=["pair"],
        selections=selections,
        min_quantity=4,
        max_quantity=4,
        hold=0.003,
        spend_ratio=0,
    )
    counts = outcomes(records)
    assert counts == {"selected": 2 * selections}, counts
    for record in records:
        assert len(record["tokens"]) == 2  # one replica took both tokens each time
    assert_never_held_twice(records)
    assert_books_balance(records, Decimal(6))
