"""Run the whole service in the foreground: web (gunicorn), Celery worker and Celery beat.

``sherdlock serve`` (``python -m config.serve``, what ``make run`` calls) starts the embedded
PostgreSQL server and embedded broker when ``DATABASE_URL`` / ``CELERY_BROKER_URL`` are unset,
migrates, starts the three processes and prints where to find them. Ctrl-C (or SIGTERM) stops
everything it started, the embedded servers included; children also die with it if it is killed
outright.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from config import local
from config.local import DATA_DIR

PR_SET_PDEATHSIG = 1
STOP_TIMEOUT = 15.0


def say(message: str) -> None:
    """Print a supervisor line."""
    print(f"[sherdlock] {message}", flush=True)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    # If the supervisor is killed with SIGKILL, the kernel sends the child SIGTERM: no orphans.
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Child:
    name: str
    process: subprocess.Popen

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                return

    def wait(self, deadline: float) -> None:
        try:
            self.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            say(f"{self.name} did not stop in time; killing it")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def spawn(name: str, argv: list[str], env: dict[str, str]) -> Child:
    """Start a child in its own process group (so Ctrl-C reaches it only through us)."""
    process = subprocess.Popen(argv, env=env, start_new_session=True, preexec_fn=_die_with_parent)
    return Child(name, process)


def port_free(host: str, port: int) -> bool:
    """Return True if nothing listens on host:port."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def web_command(python: str, host: str, port: int, env: dict[str, str]) -> list[str]:
    """Return the web server's command line (the tests and benchmarks start it the same way)."""
    return [
        python,
        "-m",
        "gunicorn",
        "config.wsgi:application",
        "-c",
        "python:config.gunicorn",
        "--bind",
        f"{host}:{port}",
        "--workers",
        env.get("WEB_CONCURRENCY", "2"),
        # A line per request costs about a tenth of a request's server time (gunicorn formats
        # every atom of it); WEB_ACCESS_LOG=1 turns it on.
        *(
            ["--access-logfile", "-"]
            if env.get("WEB_ACCESS_LOG", "") in ("1", "true", "on")
            else []
        ),
        "--graceful-timeout",
        "10",
    ]


def worker_command(python: str, env: dict[str, str]) -> list[str]:
    """Return a Celery worker's command line (``sherdlock worker``)."""
    return [
        python,
        "-m",
        "celery",
        "-A",
        "config",
        "worker",
        "--loglevel",
        "INFO",
        "--concurrency",
        env.get("CELERY_CONCURRENCY", "1"),
    ]


def beat_command(python: str) -> list[str]:
    """Return Celery beat's command line (``sherdlock beat``); its state file is kept in the data
    directory, its schedule in the database."""
    return [
        python,
        "-m",
        "celery",
        "-A",
        "config",
        "beat",
        "--loglevel",
        "INFO",
        "--schedule",
        str(DATA_DIR / "celerybeat-schedule"),
    ]


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    # The children keep their files where this process keeps its own, whatever their directory.
    env["SHERDLOCK_DATA_DIR"] = str(DATA_DIR)
    host = env.get("HOST", "127.0.0.1")
    port = int(env.get("PORT", "8000"))
    if not port_free(host, port):
        say(f"{host}:{port} is taken; set PORT=<free port> (e.g. PORT=8001 make run)")
        return 2

    database = broker = None
    children: list[Child] = []
    stopping = False

    def request_stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        if not stopping:
            say(f"received {signal.Signals(signum).name}; stopping")
        stopping = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    try:
        database = local.prepare()  # the embedded server, unless DATABASE_URL names another
        if database is not None:
            env["DATABASE_URL"] = database.url()
            state = "started" if database.started else "already running"
            say(f"embedded PostgreSQL {state} ({database.data_dir})")
        if not env.get("CELERY_BROKER_URL"):
            from config import broker as embedded_broker

            broker = embedded_broker.start(embedded_broker.DEFAULT_DIR)
            env["CELERY_BROKER_URL"] = embedded_broker.url(embedded_broker.DEFAULT_DIR)
            say(f"embedded broker started ({env['CELERY_BROKER_URL']})")

        python = sys.executable
        # Gunicorn workers (and Celery's) write their metrics to files here, so /metrics sums
        # every process. Files of a previous run would add stale counts: start empty.
        metrics_dir = DATA_DIR / "prometheus"
        shutil.rmtree(metrics_dir, ignore_errors=True)
        metrics_dir.mkdir(parents=True)
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
        say("applying migrations")
        subprocess.run(
            [python, "-m", "config.cli", "migrate", "--noinput", "-v", "1"], env=env, check=True
        )
        children.append(spawn("web", web_command(python, host, port, env), env))
        children.append(
            spawn(
                "worker",
                [
                    *worker_command(python, env),
                    "--hostname",
                    f"sherdlock-worker-{os.getpid()}@%h",
                ],
                env,
            )
        )
        children.append(spawn("beat", beat_command(python), env))
        base = f"http://{host}:{port}"
        say("running — Ctrl-C stops web, worker, beat and the embedded servers")
        say(f"API root      {base}/api/v1/")
        say(f"API docs      {base}/api/docs/")
        say(f"admin         {base}/admin/")
        say(f"dashboard     {base}/admin/dashboard/")
        say(f"metrics       {base}/metrics")
        say("admin login:  make superuser   (or: sherdlock createsuperuser)")
        say("API key:      create one in the admin under 'API clients → API keys'")

        while not stopping:
            for child in children:
                if child.process.poll() is not None:
                    say(f"{child.name} exited with {child.process.returncode}; stopping")
                    stopping = True
                    break
            time.sleep(0.2)
        return 0
    except subprocess.CalledProcessError as exc:
        say(f"set-up step failed: {exc}")
        return 1
    finally:
        for child in children:
            child.stop()
        deadline = time.monotonic() + STOP_TIMEOUT
        for child in children:
            child.wait(deadline)
        if broker is not None:
            broker.terminate()
            try:
                broker.wait(timeout=10)
            except subprocess.TimeoutExpired:
                broker.kill()
            say("embedded broker stopped")
        if database is not None and database.started:
            from config import embedded_db

            embedded_db.stop(database.data_dir)
            say("embedded PostgreSQL stopped")
        say("stopped")


if __name__ == "__main__":
    sys.exit(main())
