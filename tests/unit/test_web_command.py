"""The web server's command line, as `make run` and the benchmarks start it."""

from __future__ import annotations

import pytest

from config.serve import web_command


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_requests_are_logged_only_when_asked():
    assert "--access-logfile" not in web_command("python", "127.0.0.1", 8000, {})
    logged = web_command("python", "127.0.0.1", 8000, {"WEB_ACCESS_LOG": "1"})
    assert option(logged, "--access-logfile") == "-"


def test_workers_follow_web_concurrency():
    assert option(web_command("python", "127.0.0.1", 8000, {}), "--workers") == "2"
    assert option(web_command("python", "h", 1, {"WEB_CONCURRENCY": "3"}), "--workers") == "3"


@pytest.mark.parametrize(
    "mine, everyone, workers, over",
    [
        (2, 2, 2, True),
        (1, 2, 2, False),
        (3, 4, 2, True),
        (2, 4, 2, False),
        (2, 3, 2, False),
        (5, 8, 2, True),
        (4, 8, 2, False),
        (3, 3, 1, False),
        (2, 4, 3, False),
        (3, 4, 3, True),
    ],
)
def test_a_worker_is_over_its_share_above_an_even_split(mine, everyone, workers, over):
    from config.gunicorn import over_share

    assert over_share(mine, everyone, workers) is over


def test_a_worker_that_served_nothing_lately_counts_as_holding_nothing():
    from config.gunicorn import FRESH_SECONDS, connections_held, note_connections

    fresh = int(FRESH_SECONDS * 1000)
    now = 10_000_000
    note_connections(250, 3, now - 10)  # served a moment ago
    note_connections(251, 4, now - fresh - 1)  # its connections may have closed since
    note_connections(252, 1, now)
    try:
        assert connections_held(now) == 4
        assert connections_held(now - fresh) == 8  # when the second still counted
    finally:
        for slot in (250, 251, 252):
            note_connections(slot, 0, 0)


def test_the_share_follows_the_number_of_workers_the_server_runs_now():
    from types import SimpleNamespace

    from config import gunicorn

    worker = SimpleNamespace(
        age=253,
        nr_conns=2,
        cfg=SimpleNamespace(workers=2),
        log=SimpleNamespace(debug=lambda *args: None),
    )

    def closed(number: int) -> bool:
        req = SimpleNamespace(method="GET", path="/healthz", req_number=number, must_close=False)
        gunicorn.pre_request(worker, req)
        return req.must_close

    every = gunicorn.REBALANCE_REQUESTS
    try:
        gunicorn.note_connections(254, 1, gunicorn._now_ms())  # another worker, with one
        gunicorn.nworkers_changed(None, 2, None)
        assert not closed(every)  # 3 connections over two workers: 2 each at most
        gunicorn.nworkers_changed(None, 3, 2)  # TTIN: over three workers, 1 each
        assert closed(every)
        assert not closed(every + 1)  # only every REBALANCE_REQUESTS-th request
        gunicorn.nworkers_changed(None, 1, 3)  # TTOU twice: one worker holds them all
        assert not closed(every)
    finally:
        gunicorn.nworkers_changed(None, 0, 1)
        for slot in (253, 254):
            gunicorn.note_connections(slot, 0, 0)


@pytest.mark.parametrize("counts, warned", [(True, False), (False, True)])
def test_a_worker_that_counts_no_connections_is_reported(counts, warned, monkeypatch):
    from types import SimpleNamespace

    from config import gunicorn

    monkeypatch.setenv("WEB_THREADS", "4")  # post_fork sets it; restored after the test
    said: list[str] = []
    worker = SimpleNamespace(
        cfg=SimpleNamespace(threads=4),
        log=SimpleNamespace(warning=lambda message, *args: said.append(message % args)),
    )
    if counts:
        worker.nr_conns = 0
    gunicorn.post_fork(None, worker)
    assert bool(said) is warned
    if warned:
        assert "nr_conns" in said[0] and "SimpleNamespace" in said[0]
