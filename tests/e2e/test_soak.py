"""Soak: web server under steady load, as ``make bench`` drives its HTTP path, must not grow.

Two workers, two load processes selecting then spending or releasing
(tests/workers/load_client.py) on the test database. Each worker's resident memory is sampled
after a warm-up and again at the end: it grows by less than 10 %, every answer is a success or
a healthy refusal, the workers that started are the ones that finish, and the database's rows
keep every invariant (tests/helpers/invariants.py). ``-m slow`` runs ten minutes.
"""

from __future__ import annotations

import time
from decimal import Decimal

import psutil
import pytest

from tests.e2e.faults import SUCCESS, read_records, start_load, unexpected
from tests.e2e.servers import web_server
from tests.helpers.invariants import check_invariants

WALLETS = ["soak-a", "soak-b"]
TOKENS = 200  # of 10, per wallet
ISSUED = len(WALLETS) * TOKENS * 10
MAX_GROWTH = 0.10


def seed() -> str:
    from clients.models import ApiKey
    from tokens.models import Token

    Token.objects.bulk_create(
        Token(tx_id=f"mint-{wallet}", index=i, wallet=wallet, currency="USD", quantity=Decimal(10))
        for wallet in WALLETS
        for i in range(TOKENS)
    )
    return ApiKey.objects.create_key(name="soak", wallets=WALLETS, can_select=True)[1]


def rss(pids: list[int]) -> dict[int, int]:
    return {pid: psutil.Process(pid).memory_info().rss for pid in pids}


@pytest.mark.parametrize(
    "warm_up, measured",
    [(8, 12), pytest.param(60, 600, marks=[pytest.mark.slow, pytest.mark.timeout(1000)])],
)
def test_workers_do_not_grow_under_steady_load(subprocess_env, tmp_path, warm_up, measured):
    key = seed()
    env = {
        **subprocess_env,
        "SHERDLOCK_RATE_SELECTIONS_PER_KEY": "off",
        "SHERDLOCK_RATE_SELECTIONS_PER_WALLET": "off",
    }
    outs = [tmp_path / f"client{n}.jsonl" for n in range(2)]
    with web_server(env, tmp_path / "web.log", workers=2) as server:
        clients = [
            start_load(
                server.base, key, out, f"soak{n}", WALLETS, warm_up + measured + 2, seed_value=n
            )
            for n, out in enumerate(outs)
        ]
        time.sleep(warm_up)
        workers = [child.pid for child in psutil.Process(server.process.pid).children()]
        before = rss(workers)
        time.sleep(measured)
        after = rss(workers)
        for client in clients:
            assert client.wait(timeout=120) == 0, client.stderr.read()
        log = server.log_text()
    records = read_records(outs)
    measured_records = [r for r in records if r["start"] >= records[0]["start"] + warm_up]
    growth = {pid: after[pid] / before[pid] - 1 for pid in workers}
    print(
        f"\n[soak] {measured} s after {warm_up} s warm-up: {len(measured_records)} requests "
        f"({len(measured_records) / measured:.0f}/s), "
        f"{sum(r['status'] in SUCCESS for r in measured_records)} succeeded; worker RSS "
        + ", ".join(
            f"{before[p] / 2**20:.1f} -> {after[p] / 2**20:.1f} MiB ({growth[p]:+.1%})"
            for p in workers
        )
    )
    assert len(workers) == 2
    assert unexpected(records) == []
    assert sum(r["status"] in SUCCESS for r in measured_records) > measured  # > 1/s
    assert all(g < MAX_GROWTH for g in growth.values()), growth
    assert "Traceback" not in log and "WORKER TIMEOUT" not in log, log[-3000:]
    check_invariants(issued=Decimal(ISSUED))
