"""Replica processes selecting at once (``tests.workers.replica``), and what they must leave.

``run_replicas`` starts them and returns what each one recorded; the checks read the database's
own rows against those records: no token held twice, the books balanced, nothing leaked.
``SHORT_AND_LONG`` runs a contention test briefly by default and at length with ``-m slow``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from collections.abc import Mapping
from decimal import Decimal
from operator import itemgetter
from pathlib import Path

import pytest
from django.db.models import Sum

from locks.models import Selection, TokenLock
from tests.helpers.invariants import check_invariants
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
