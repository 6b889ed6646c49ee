"""A replica killed while holding tokens: its leases run out, housekeeping clears them, and
another replica selects and spends the same tokens. Nothing is lost or held twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest
from django.db.models import Sum
from django.db.models.functions import Now

from locks import replica
from locks.housekeeping import run_housekeeping
from locks.models import TokenLock
from locks.services import select_tokens
from sherdlock import FundsLocked
from tests.factories import make_tokens
from tests.helpers.invariants import check_invariants
from tests.helpers.processes import ROOT
from tokens.models import Token

LEASE = 5  # seconds, for the replicas started here: outlasts a refusal on a slow host
TOKEN_QUANTITY = 10
WAIT = 30.0


@pytest.fixture(autouse=True)
def own_replica():
    """Stop this process's selector (and its listener connection) after the test."""
    yield
    replica.reset()


def start_replica(
    env: dict[str, str], tmp_path: Path, tx_id: str, wallet: str, quantity: int, mode: str
) -> tuple[subprocess.Popen, Path]:
    """Start a replica (``tests.workers.holding_replica``) with leases of LEASE seconds."""
    report = tmp_path / f"{tx_id}.json"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.workers.holding_replica",
            *(tx_id, wallet, str(quantity), mode, str(report)),
        ],
        cwd=ROOT,
        env={**env, "SHERDLOCK_LEASE_SECONDS": str(LEASE)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, report


def wait_for_report(process: subprocess.Popen, report: Path) -> dict:
    deadline = time.monotonic() + WAIT
    while not report.exists():
        if process.poll() is not None:
            pytest.fail(f"replica exited with {process.returncode}: {process.stderr.read()}")
        assert time.monotonic() < deadline, "replica never reported"
        time.sleep(0.05)
    return json.loads(report.read_text())


def unspent_total() -> int:
    return int(Token.objects.filter(spent_at__isnull=True).aggregate(s=Sum("quantity"))["s"] or 0)


@pytest.mark.parametrize("replicas", [2, pytest.param(6, marks=pytest.mark.slow)])
def test_tokens_of_a_killed_replica_are_selectable_again(tmp_path, subprocess_env, replicas):
    wallets = [f"w{n}" for n in range(replicas)]
    for wallet in wallets:
        make_tokens(3, wallet=wallet, quantity=TOKEN_QUANTITY)
    supply = unspent_total()
    per_wallet = 3 * TOKEN_QUANTITY

    started = [
        start_replica(subprocess_env, tmp_path, f"dead-{w}", w, per_wallet, "hold") for w in wallets
    ]
    try:
        held = [wait_for_report(process, report) for process, report in started]
    finally:
        for process, _ in started:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    assert all(process.returncode == -signal.SIGKILL for process, _ in started)
    dead_tx = [f"dead-{w}" for w in wallets]
    assert TokenLock.objects.filter(spender_tx_id__in=dead_tx).count() == 3 * replicas

    # While the dead replica's leases run, its tokens stay locked: no one can take them. The
    # wallet of the last report holds the lease that began last.
    latest = max(zip(wallets, started, strict=True), key=lambda pair: pair[1][1].stat().st_mtime)[0]
    with pytest.raises(FundsLocked):
        select_tokens("too-early", latest, "USD", per_wallet)

    deadline = time.monotonic() + WAIT
    while TokenLock.objects.filter(expires_at__gt=Now()).exists():
        assert time.monotonic() < deadline, "leases never ran out"
        time.sleep(0.1)
    run = run_housekeeping(batch_size=4, grace_seconds=0)
    assert run.expired_removed == 3 * replicas
    assert not TokenLock.objects.filter(spender_tx_id__in=dead_tx).exists()
    assert unspent_total() == supply  # the crash lost nothing

    survivors = [
        start_replica(subprocess_env, tmp_path, f"alive-{w}", w, per_wallet, "spend")
        for w in wallets
    ]
    for (process, report), before in zip(survivors, held, strict=True):
        after = wait_for_report(process, report)
        assert process.wait(timeout=WAIT) == 0, process.stderr.read()
        assert sorted(after["tokens"]) == sorted(before["tokens"])
        assert after["fence"] > before["fence"]
    for wallet in wallets:
        assert not Token.objects.filter(wallet=wallet, spent_at__isnull=True).exists()
        assert set(Token.objects.filter(wallet=wallet).values_list("spent_by", flat=True)) == {
            f"alive-{wallet}"
        }
    assert unspent_total() == supply  # all of it now belongs to bob
    assert Token.objects.filter(wallet="bob").aggregate(s=Sum("quantity"))["s"] == supply
    check_invariants(issued=Decimal(supply), recorded_supply=True)
