"""The release as a team deploys it: the wheel, installed into a new virtualenv, run by the guide.

The wheel is built from a copy of the checkout and installed into a virtualenv in an empty
directory (nothing of the checkout importable there). Every command of docs/deployment.md's
``sh`` blocks then runs as written, in order, against a fresh database of the test server and a
broker of its own: migrations, a key, the metrics directory, the web server, worker and beat
(each as its own process), the probes. Then the README's API walk-through runs against them, the
admin's login page is loaded with its stylesheet, a housekeeping pass that beat scheduled is
seen run by the worker, and every process stops cleanly on SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from config import __version__, broker
from tests.e2e.test_serve import free_port
from tests.helpers.processes import ROOT, database_url

GUIDE = ROOT / "docs" / "deployment.md"
README = ROOT / "README.md"
PROCESSES = ("web", "worker", "beat")
WAIT = 90.0  # seconds for a process to come up or a scheduled pass to run, on a busy machine

FENCE = re.compile(r"^(\s*)```(\w*)\s*$")


def blocks(text: str) -> list[tuple[str, str, list[str]]]:
    """Return the fenced blocks of Markdown text: (section heading, language, lines)."""
    out: list[tuple[str, str, list[str]]] = []
    section, current, language, indent = "", None, "", ""
    for line in text.splitlines():
        fence = FENCE.match(line)
        if current is None:
            if line.startswith("## "):
                section = line[3:].strip()
            elif fence:
                current, indent, language = [], fence.group(1), fence.group(2)
        elif fence and fence.group(2) == "":
            out.append((section, language, current))
            current = None
        else:
            current.append(line.removeprefix(indent))
    return out


def commands(lines: list[str]) -> list[str]:
    """Return a shell block's commands: one per line (continuations joined), comments left out."""
    out, pending = [], ""
    for line in lines:
        pending += line
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        if pending.strip() and not pending.lstrip().startswith("#"):
            out.append(pending.strip())
        pending = ""
    return out


def guide() -> tuple[list[tuple[str, list[str]]], set[str]]:
    """Return the guide's shell commands by section, and the variables its environment names."""
    found = blocks(GUIDE.read_text())
    shell = [(section, commands(lines)) for section, language, lines in found if language == "sh"]
    (environment,) = [lines for _, language, lines in found if language == "ini"]
    names = {line.split("=", 1)[0] for line in environment if "=" in line and line[0] != "#"}
    return shell, names


def walk_through() -> str:
    """Return the README's API walk-through (the bash block after "A walk-through in bash")."""
    text = README.read_text()
    after = text[text.index("A walk-through in bash") :]
    (_, _, lines), *_ = [block for block in blocks(after) if block[1] == "sh"]
    return "\n".join(lines)


def json_documents(text: str) -> list:
    """Split the concatenated JSON answers curl printed."""
    decoder, out, at = json.JSONDecoder(), [], 0
    while (at := _skip_space(text, at)) < len(text):
        value, at = decoder.raw_decode(text, at)
        out.append(value)
    return out


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def until(predicate, what: str, logs: dict[str, Path], timeout: float = WAIT):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {n}\n{p.read_text()[-3000:]}" for n, p in logs.items())
            pytest.fail(f"timed out waiting for {what}\n{tails}")
        time.sleep(0.3)
    return value


def source_copy(target: Path) -> Path:
    """Copy the checkout's files (tracked, or new and not ignored): a clean checkout of them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


@pytest.fixture
def fresh_database(db):
    """An empty database on the test server: its URL; dropped afterwards."""
    name = f"release_{uuid.uuid4().hex[:12]}"
    admin = database_url({**connection.settings_dict, "NAME": "postgres"})
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url({**connection.settings_dict, "NAME": name})
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def stop(process: subprocess.Popen) -> int:
    """SIGTERM, as a supervisor stops it; return its exit status (killed after 30 s)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return -9


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_guide_shows_each_process_and_its_environment():
    shell, names = guide()
    assert shell[0][0] == "Build and install"
    every = [command for _, block in shell for command in block]
    assert [
        c for c in every if c.startswith(("sherdlock web", "sherdlock worker", "sherdlock beat"))
    ] == [f"sherdlock {p}" for p in PROCESSES]
    assert every.index("sherdlock migrate --noinput") < every.index("sherdlock web")
    assert {"DATABASE_URL", "CELERY_BROKER_URL", "PROMETHEUS_MULTIPROC_DIR"} <= names


@pytest.mark.timeout(900)
def test_the_wheel_installed_from_scratch_serves_as_the_guide_says(tmp_path, fresh_database):
    shell, documented = guide()
    (build_section, build), *rest = shell
    assert build_section == "Build and install"

    # A python3 that is the one running the tests (3.11+, with pip), first on PATH.
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "python3").symlink_to(sys.executable)
    host = tmp_path / "host"
    host.mkdir()
    port = free_port()
    broker_dir = tmp_path / "redis"
    redis = broker.start(broker_dir)
    service = {
        "SHERDLOCK_DATA_DIR": str(host / "data"),
        "DATABASE_URL": fresh_database,
        "CELERY_BROKER_URL": broker.url(broker_dir),
        "SECRET_KEY": "release-test-" + uuid.uuid4().hex,
        "LOG_FORMAT": "json",
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "WEB_CONCURRENCY": "2",
        "ALLOWED_HOSTS": "127.0.0.1",
        "CSRF_TRUSTED_ORIGINS": f"http://127.0.0.1:{port}",
        "FORWARDED_ALLOW_IPS": "127.0.0.1",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "CELERY_CONCURRENCY": "1",
    }
    # Everything the test configures is in the guide's environment.
    assert set(service) <= documented, set(service) - documented
    env = {
        "PATH": os.pathsep.join([str(host / "venv" / "bin"), str(shims), os.environ["PATH"]]),
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "LANG": "C.UTF-8",
        **{k: v for k, v in os.environ.items() if k.startswith("PIP_")},
        **service,
    }
    logs: dict[str, Path] = {}
    processes: dict[str, subprocess.Popen] = {}
    outputs: dict[str, str] = {}

    def run(command: str, cwd: Path) -> str:
        result = subprocess.run(
            ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
        return result.stdout

    try:
        # Build, in a clean copy of the checkout, as the guide says; the host gets the wheel.
        source = source_copy(tmp_path / "source")
        for command in build:
            run(command, source)
        (wheel,) = (source / "dist").glob("sherdlock-*.whl")
        assert wheel.name == f"sherdlock-{__version__}-py3-none-any.whl"
        shutil.copy(wheel, host)
        import zipfile

        shipped = set(zipfile.ZipFile(wheel).namelist())
        assert "locks/templates/admin/dashboard.html" in shipped
        assert not [n for n in shipped if "pgbouncer" in n or n.startswith("tests/")]
        tracked = {n for n in shipped if not n.startswith(f"sherdlock-{__version__}.dist-info/")}
        assert tracked <= {str(p.relative_to(source)) for p in source.rglob("*") if p.is_file()}

        base = f"http://127.0.0.1:{port}"
        for _, block in rest:
            for command in block:
                words = shlex.split(command)
                if words[:1] == ["sherdlock"] and words[1:2] and words[1] in PROCESSES:
                    name = words[1]
                    logs[name] = tmp_path / f"{name}.log"
                    with logs[name].open("w") as out:
                        processes[name] = subprocess.Popen(
                            ["bash", "-c", f"exec {command}"],
                            cwd=host,
                            env=env,
                            stdout=out,
                            stderr=subprocess.STDOUT,
                            start_new_session=True,
                        )
                    if name == "beat":  # the last: wait for the web server to serve
                        until(lambda: _answers(f"{base}/healthz"), "the web server", logs)
                else:
                    outputs[command] = run(command, host)

        # The installed package runs from the virtualenv, its data where it was told.
        where = run("venv/bin/python -c 'import config; print(config.__file__)'", host)
        assert where.startswith(str(host / "venv")), where
        assert (host / "data").is_dir()
        assert not list((host / "venv").rglob(".data"))
        assert outputs["sherdlock --version"].strip() == f"sherdlock {__version__}"
        assert re.fullmatch(
            r"\S+\.\S+\n", outputs[next(c for c in outputs if "create_api_key" in c)]
        )
        assert json.loads(outputs[next(c for c in outputs if c.endswith('/readyz"'))]) == {
            "status": "ok"
        }
        assert (
            "x-request-id: deploy-check-1"
            in outputs[next(c for c in outputs if "deploy-check-1" in c)].lower()
        )

        # The README's walk-through, against these processes.
        script = walk_through().replace(".venv/bin/sherdlock", "sherdlock")
        script = script.replace("http://127.0.0.1:8000", base)
        answers = json_documents(run(script, host))
        issued, selected, spent, balances = answers
        assert issued["created"] == 2, answers
        assert (selected["quantity"], selected["total"]) == ("70", "110"), answers
        assert spent["status"] == "spent", answers
        assert [(o["wallet"], o["quantity"]) for o in spent["outputs"]] == [
            ("bob", "70"),
            ("alice", "40"),
        ], answers
        assert balances["balances"] == [
            {"currency": "USD", "unspent": "40", "locked": "0", "available": "40"}
        ], answers

        # The admin's login page, and its stylesheet served by the web server itself.
        status, _, page = get(f"{base}/admin/login/")
        assert status == 200
        sheets = re.findall(rb'<link rel="stylesheet" href="([^"]+)"', page)
        assert sheets
        for sheet in sheets:
            status, headers, body = get(base + sheet.decode())
            assert status == 200 and headers["Content-Type"].startswith("text/css"), sheet
            assert body

        # A request id given is answered back and named by the JSON log line of the request.
        status, headers, _ = get(f"{base}/api/v1/no-such-thing/", {"X-Request-ID": "rel-404"})
        assert status == 404 and headers["X-Request-ID"] == "rel-404"
        logged = until(
            lambda: [
                json.loads(line)
                for line in logs["web"].read_text().splitlines()
                if "rel-404" in line
            ],
            "the 404's log line",
            logs,
        )
        assert logged[0]["request_id"] == "rel-404" and logged[0]["logger"] == "django.request"
        # Every line of the web server is a JSON object, gunicorn's own included.
        lines = [json.loads(line) for line in logs["web"].read_text().splitlines() if line]
        assert any(line["logger"].startswith("gunicorn") for line in lines)

        # Beat schedules a pass, the worker runs it; the web server's /metrics reports it.
        until(
            lambda: (
                "locks.housekeeping" in logs["worker"].read_text()
                and "succeeded" in logs["worker"].read_text()
            ),
            "a scheduled housekeeping pass",
            logs,
        )
        with psycopg.connect(fresh_database) as conn:
            runs = conn.execute("SELECT count(*) FROM locks_housekeepingrun").fetchone()[0]
            sessions = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            ).fetchone()[0]
        assert runs >= 1
        # The guide's bound for 2 web workers, one Celery worker process and beat (this
        # connection included).
        assert sessions <= 2 * (4 + 2) + (4 + 1) + 4 + 1, sessions
        _, _, metrics = get(f"{base}/metrics")
        text = metrics.decode()
        last = re.search(r"^sherdlock_housekeeping_last_run_timestamp_seconds (\S+)$", text, re.M)
        assert last and float(last.group(1)) > 0
        for name in (
            "sherdlock_rate_limit_refusals_total",
            "sherdlock_db_pool_connections_in_use",
            "sherdlock_db_pool_waiting",
        ):
            assert re.search(rf"^{name}\b", text, re.M), name
    finally:
        codes = {name: stop(process) for name, process in processes.items()}
        redis.terminate()
        redis.wait(timeout=10)
    # Stopped cleanly: each exits 0 on SIGTERM, leaving no process of its own behind.
    assert codes == dict.fromkeys(PROCESSES, 0), {
        name: logs[name].read_text()[-2000:] for name in logs
    }
    for process in processes.values():
        assert not group_alive(process.pid)


def _answers(url: str) -> bool:
    with contextlib.suppress(OSError):
        return get(url)[0] == 200
    return False
