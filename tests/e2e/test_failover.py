"""Losing the primary: the database gone for good, and a standby promoted under load.

The servers are started by the test (tests/e2e/cluster.py) and the web server runs against
libpq's multi-host URL (``target_session_attrs=read-write``), so that it finds whichever server
is primary by itself. With the database gone every request answers 503 at once, not after the
pool's timeout. After a failover to a synchronous standby every spend answered 200 is on the new
primary, no token is spent twice, value is conserved, and the only errors are 503 while no
primary answers and ``lease_lost`` / ``not_found`` for lease grants the failover forgot (they
commit asynchronously). Unavailability (first 503 to first success) is measured and printed.
Spends and issues wait for the synchronous standby even where commits are configured
asynchronous, and a Celery worker and beat carry on with the promoted standby.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import subprocess
import sys
import time
import types
from collections import Counter
from decimal import Decimal

import pytest

from common.breaker import PROBE_INTERVAL
from config import broker
from locks.listener import APPLICATION_NAME
from tests.e2e.cluster import cluster
from tests.e2e.faults import (
    SUCCESS,
    check_invariants,
    read_records,
    seed,
    start_load,
    unexpected,
    wait_for_no_live_locks,
)
from tests.e2e.servers import web_server
from tests.e2e.test_celery_housekeeping import stop
from tests.e2e.test_faults import forgotten_grant, server_errors
from tests.helpers.processes import ROOT, child_env, manage, wait_for

LEASE = 3.0
TOKENS_PER_WALLET = 40
QUANTITY = 10
# What "at once" means for a 503 while no database answers: the service waits at most a quarter
# of a second for the next connection attempt and as long for a connection
# (common.breaker.PROBE_INTERVAL, OPEN_WAIT); the rest is room for a loaded machine.
# Without the breaker each request waited the pool's 30 s.
PROMPT = 2.0
# What psycopg_pool logs at each failed connection attempt.
FAILED_ATTEMPT = "error connecting in"


def service_env(url: str) -> dict[str, str]:
    return {
        **child_env(url),
        "SHERDLOCK_LEASE_SECONDS": str(LEASE),
        "SHERDLOCK_RATE_SELECTIONS_PER_KEY": "off",
        "SHERDLOCK_RATE_SELECTIONS_PER_WALLET": "off",
    }


def call(base: str, key: str, method: str, path: str, body: dict | None = None) -> tuple:
    """Send one request; return (status, code, Retry-After, seconds it took)."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=PROMPT * 5)
    headers = {"Authorization": f"Api-Key {key}", "Content-Type": "application/json"}
    started = time.monotonic()
    try:
        conn.request(method, path, json.dumps(body) if body is not None else None, headers)
        response = conn.getresponse()
        payload = response.read()
    finally:
        conn.close()
    took = time.monotonic() - started
    code = json.loads(payload).get("code") if payload.startswith(b"{") else None
    return response.status, code, response.getheader("Retry-After"), took


@pytest.mark.timeout(240)
def test_with_the_database_gone_every_endpoint_answers_503_at_once(tmp_path):
    with cluster() as servers:
        primary = servers.start_primary("n0")
        servers.migrate()
        key = seed(types.SimpleNamespace(url=servers.url), ["w"], 10, QUANTITY)
        with web_server(service_env(servers.url), tmp_path / "web.log", workers=2) as server:
            select = {"tx_id": "t-1", "wallet": "w", "currency": "USD", "quantity": "5"}
            assert call(server.base, key, "POST", "/api/v1/selections/", select)[0] == 201
            assert call(server.base, key, "GET", "/readyz")[0] == 200
            primary.kill()
            spend = {"outputs": [{"index": 0, "wallet": "w", "currency": "USD", "quantity": "5"}]}
            requests = [
                ("GET", "/readyz", None),
                ("POST", "/api/v1/selections/", {**select, "tx_id": "t-2"}),
                ("GET", "/api/v1/selections/t-1/"),
                ("POST", "/api/v1/selections/t-1/spend/", spend),
                ("POST", "/api/v1/selections/t-1/release/", None),
            ]
            # Each endpoint in turn, then many at once (more than a worker's pool of
            # connections): none may wait for a server that is not coming back.
            began = time.monotonic()
            answers = [call(server.base, key, *request) for request in requests * 2]
            with concurrent.futures.ThreadPoolExecutor(24) as pool:
                answers += pool.map(lambda r: call(server.base, key, *r), requests * 40)
            spell = time.monotonic() - began
            log = server.log_text()
    slowest = max(took for *_, took in answers)
    attempts = log.count(FAILED_ATTEMPT)
    print(
        f"\n[failover] database gone: {len(answers)} answers in {spell:.2f} s, slowest "
        f"{slowest:.3f} s, {attempts} connection attempts"
    )
    # A process tries to connect a few times a second, not once per request: at most one try
    # (psycopg_pool's two attempts, common.postgres.RECONNECT_TIMEOUT) per PROBE_INTERVAL, and
    # as much again for slack. Once per request would be about two attempts per answer.
    assert attempts <= 2 * 2 * WORKERS * (spell / PROBE_INTERVAL + 2), attempts
    for (status, code, retry_after, took), request in zip(answers, requests * 42, strict=True):
        assert (status, code) == (503, "database_unavailable") or (
            request[1] == "/readyz" and status == 503
        ), (request, status, code)
        assert retry_after is not None, request
        assert took < PROMPT, f"{request[:2]} answered after {took:.2f} s"
    assert "Traceback" not in log, log[-3000:]


# Backends of the database waiting for a synchronous standby to confirm their commit.
WAITING_FOR_STANDBY = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = 'sherdlock' AND wait_event = 'SyncRep'"
)


@pytest.mark.timeout(240)
def test_spends_and_issues_wait_for_the_standby_even_where_commits_are_asynchronous(tmp_path):
    """A server, database or role with synchronous_commit off must not make money volatile."""
    with cluster() as servers:
        primary = servers.start_primary("n0")
        standby = servers.add_standby("n1")
        servers.migrate()
        key = seed(types.SimpleNamespace(url=servers.url), ["w"], 10, QUANTITY)
        primary.execute("ALTER DATABASE sherdlock SET synchronous_commit = off")
        with web_server(service_env(servers.url), tmp_path / "web.log", workers=2) as server:
            base = server.base
            select = {"tx_id": "t-1", "wallet": "w", "currency": "USD", "quantity": "5"}
            assert call(base, key, "POST", "/api/v1/selections/", select)[0] == 201
            standby.kill()  # from now on a synchronous commit waits until it is back
            # A lease grant commits asynchronously: it does not wait for the standby.
            second = {**select, "tx_id": "t-2", "quantity": "1"}
            assert call(base, key, "POST", "/api/v1/selections/", second)[0] == 201
            spend = {"outputs": [{"index": 0, "wallet": "w", "currency": "USD", "quantity": "10"}]}
            issue = {"tokens": [{**spend["outputs"][0], "tx_id": "mint-2"}]}
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                spent = pool.submit(call, base, key, "POST", "/api/v1/selections/t-1/spend/", spend)
                issued = pool.submit(call, base, key, "POST", "/api/v1/tokens/", issue)
                deadline = time.monotonic() + 30
                while primary.query(WAITING_FOR_STANDBY)[0][0] < 2:
                    assert not spent.done() and not issued.done(), (spent, issued)
                    assert time.monotonic() < deadline, "nothing waits for the standby"
                    time.sleep(0.05)
                assert not spent.done() and not issued.done()
                standby.start()
                assert spent.result()[0] == 200
                assert issued.result()[0] == 201
            log = server.log_text()
    assert "Traceback" not in log, log[-3000:]


# A failover manager's time to notice the primary is gone and to decide: while it decides, no
# server is primary and requests answer 503 at once.
DETECTION = 1.0
# Seconds from the promotion to the first request served again: each process tries to connect a
# few times a second, so a loaded host's scheduling, not the service, makes up most of this.
SERVES_AGAIN_WITHIN = 5.0


def first_after(records: list[dict], when: float, statuses: set[int]) -> dict | None:
    later = [r for r in records if r["start"] >= when and r["status"] in statuses]
    return min(later, key=lambda r: r["end"], default=None)


def failed_since(outs: list, when: float) -> bool:
    """Whether the load processes have recorded a request started at ``when`` or later that
    found no primary. Each process writes its requests in the order they started, so only
    the end of its file is read (and not a line still being written)."""
    for path in outs:
        text = path.read_text() if path.exists() else ""
        for line in reversed(text[: text.rfind("\n") + 1].splitlines()):
            record = json.loads(line)
            if record["start"] < when:
                break
            if record["status"] in (0, 503):
                return True
    return False


def assert_answered_through_failover(
    records: list[dict], lost: set[str], recorded: set[str], log: str
) -> None:
    """No spend answered 200 was lost, every request was answered, nothing but 503 while no
    primary answered and the refusals of a healthy server (among them lease_lost, and
    not_found for a grant the failover forgot), and no traceback in the service's log."""
    assert not lost, f"spends answered 200 but not on the new primary: {sorted(lost)[:10]}"
    assert server_errors(records) == []
    assert not [r for r in records if r["status"] == 0], "a request was never answered"
    forgotten = [r for r in records if forgotten_grant(r, recorded)]
    assert [r for r in unexpected(records) if r not in forgotten and r["status"] != 503] == []
    assert "Traceback" not in log, log[-3000:]


def spends_answered(records: list[dict]) -> set[str]:
    """Return the tx ids of selections whose spend was answered 200."""
    return {
        r["path"].strip("/").split("/")[3]
        for r in records
        if r["status"] == 200 and r["path"].endswith("/spend/")
    }


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "failovers, gap, duration",
    [(1, 6, 14), pytest.param(4, 8, 100, marks=pytest.mark.slow)],
    ids=["once", "repeatedly"],
)
def test_a_standby_promoted_under_load_loses_no_answered_spend(tmp_path, failovers, gap, duration):
    with cluster() as servers:
        servers.start_primary("n0")
        servers.add_standby("n1")
        servers.migrate(LISTENING)
        wallets = ["w0", "w1"]
        key = seed(types.SimpleNamespace(url=servers.url), wallets, TOKENS_PER_WALLET, QUANTITY)
        supply = Decimal(TOKENS_PER_WALLET * QUANTITY * len(wallets))
        outs = [tmp_path / f"client{n}.jsonl" for n in range(4)]
        events = []  # (primary killed, standby promoted), monotonic
        env = {**service_env(servers.url), **LISTENING}
        with web_server(env, tmp_path / "web.log", workers=WORKERS) as server:
            clients = [
                start_load(server.base, key, out, f"c{n}", [wallets[n % 2]], duration, n)
                for n, out in enumerate(outs)
            ]
            for _ in range(failovers):
                time.sleep(gap - DETECTION)
                assert all(c.poll() is None for c in clients), "the load ended before a failover"
                old = servers.primary
                new = next(node for node in servers.nodes if node is not old)
                old.kill()
                killed = time.monotonic()  # every process of the old primary is gone
                # The manager promotes once a request started since has failed, and no sooner
                # than DETECTION after the kill. Every client may have had a request in flight
                # at the kill, refused and retried only after Retry-After (a second or more):
                # after a fixed DETECTION alone, those retries could all find the new primary
                # and no request of the outage would have failed to measure it by.
                wait_for(
                    lambda k=killed: failed_since(outs, k),
                    "a request to fail with the primary lost",
                )
                time.sleep(max(0.0, killed + DETECTION - time.monotonic()))
                servers.fail_over(new)
                events.append((killed, time.monotonic()))
                # Every worker's cache listener finds the new primary by itself.
                wait_for(lambda n=new: listeners(n) >= WORKERS, "the listeners to reconnect")
                if len(events) < failovers:
                    servers.follow(old)  # the lost machine comes back as a standby
            assert all(c.poll() is None for c in clients), "the load ended before the last one"
            for client in clients:
                client.wait(timeout=duration + 120)
                assert client.returncode == 0, client.stderr.read()
            log = server.log_text()
        records = read_records(outs)
        primary = servers.primary
        wait_for_no_live_locks(primary, LEASE)
        report = check_invariants(primary, supply)
        spent = {row[0] for row in primary.query(SPENT)}
        recorded = {row[0] for row in primary.query("SELECT tx_id FROM locks_selection")}
    lost = spends_answered(records) - spent
    outages = []
    for killed, promoted in events:
        failed = first_after(records, killed, {0, 503})
        assert failed is not None, "no request failed: the primary was never lost"
        back = first_after(records, failed["start"], SUCCESS)
        assert back is not None, "no request succeeded after the failover"
        outages.append((back["end"] - failed["end"], back["end"] - promoted))
    codes = Counter(r["code"] for r in records if r["status"] not in SUCCESS)
    print(
        f"\n[failover] {failovers} failover(s) in {duration} s: {len(records)} requests, "
        f"{sum(r['status'] == 503 for r in records)} answered 503, "
        f"{len(spends_answered(records))} spends answered 200, {len(lost)} of them lost; "
        "unavailable (first 503 to first success; promotion to first success): "
        + ", ".join(f"{down:.3f} s; {after:.3f} s" for down, after in outages)
        + f"; refusals {dict(codes)}; {report}"
    )
    assert_answered_through_failover(records, lost, recorded, log)
    # Serving again is bounded by the promotion, not by a timeout of the service: every process
    # reaches the new primary within a few of its connection attempts.
    assert all(after < SERVES_AGAIN_WITHIN for _, after in outages), outages


WORKERS = 2
# The web workers listen for changes to their caches (locks.listener), on a session of their own.
LISTENING = {"SHERDLOCK_LISTEN": "1"}


def listeners(node) -> int:
    return node.query(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (APPLICATION_NAME,)
    )[0][0]


# The selections whose spend committed.
SPENT = "SELECT tx_id FROM locks_selection WHERE status = 'spent'"


# Beat as `celery -A config beat`, re-reading its whole schedule every second instead of every
# few minutes, so that a re-read falls within the outage.
BEAT = (
    "import sys, django; django.setup(); import django_celery_beat.schedulers as s; "
    "s.SCHEDULE_SYNC_MAX_INTERVAL = 1; "
    "from celery.__main__ import main; sys.argv[0] = 'celery'; main()"
)
SCHEDULE_EVERY_SECOND = (
    "from tests.e2e.test_celery_housekeeping import schedule_every_second; schedule_every_second()"
)
RUNS_SINCE = "SELECT count(*) FROM locks_housekeepingrun WHERE started_at > %s"


@pytest.mark.timeout(300)
def test_celery_worker_and_beat_carry_on_with_the_promoted_standby(tmp_path):
    with cluster() as servers:
        servers.start_primary("n0")
        standby = servers.add_standby("n1")
        servers.migrate()
        env = child_env(servers.url)
        manage("shell", "-c", SCHEDULE_EVERY_SECOND, env=env, timeout=120)
        redis = broker.start(tmp_path / "redis")
        env["CELERY_BROKER_URL"] = broker.url(tmp_path / "redis")
        logs = {"worker": tmp_path / "worker.log", "beat": tmp_path / "beat.log"}
        worker_argv = ["-m", "celery", "-A", "config", "worker", "--concurrency", "1"]
        beat_argv = ["-c", BEAT, "-A", "config", "beat", "--schedule", str(tmp_path / "sched")]
        processes = []
        try:
            for name, argv in (("worker", worker_argv), ("beat", beat_argv)):
                with logs[name].open("w") as out:
                    processes.append(
                        subprocess.Popen(
                            [sys.executable, *argv, "--loglevel", "INFO"],
                            cwd=ROOT,
                            env=env,
                            stdout=out,
                            stderr=subprocess.STDOUT,
                            start_new_session=True,
                        )
                    )

            def tails() -> str:
                return "\n".join(f"--- {n}\n{p.read_text()[-3000:]}" for n, p in logs.items())

            def ran_since(moment) -> bool:
                assert all(p.poll() is None for p in processes), tails()
                return servers.primary.query(RUNS_SINCE, (moment,))[0][0] > 0

            def kept_its_schedule() -> bool:
                assert all(p.poll() is None for p in processes), tails()
                return "keeping the last one" in logs["beat"].read_text()

            started = servers.primary.query("SELECT now()")[0][0]
            wait_for(lambda: ran_since(started), "housekeeping to run", timeout=60)
            servers.primary.kill()
            # Promoted once beat has failed to re-read its schedule while no server is primary
            # and kept it (the outage the test is about), not after a guess at how long that takes.
            wait_for(kept_its_schedule, "beat to keep its schedule with no primary", timeout=60)
            servers.fail_over(standby)
            promoted = standby.query("SELECT now()")[0][0]
            wait_for(lambda: ran_since(promoted), "housekeeping on the new primary", timeout=60)
        finally:
            for process in processes:
                stop(process)
            redis.terminate()
            redis.wait(timeout=10)
    assert "keeping the last one" in logs["beat"].read_text(), tails()
