"""The ``sherdlock`` command: Django's management commands, and the service's processes.

``sherdlock serve`` runs everything in the foreground, as ``make run`` does (``config.serve``);
``sherdlock web``, ``sherdlock worker`` and ``sherdlock beat`` run one process each, as a
deployment runs them (docs/deployment.md), any further arguments going to gunicorn or Celery;
every other command is a management command (``sherdlock migrate``, ``sherdlock
create_api_key ...``, ``sherdlock housekeep``), as ``manage.py`` runs it in a checkout.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from config import __version__

PROG = "sherdlock"
MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"

# The processes, each its own program: what follows the name on the command line is its own.
PROCESSES = {
    "web": "the web server (gunicorn): the API, the admin, /metrics and the probes",
    "worker": "a Celery worker: runs the housekeeping passes beat schedules",
    "beat": "Celery beat: schedules housekeeping (run exactly one)",
    "serve": "all of the above in the foreground, with the embedded servers when no URL is given",
}

USAGE = f"""usage: {PROG} <command> [arguments]

Processes:
{chr(10).join(f"  {name:<8}{what}" for name, what in PROCESSES.items())}

Management commands (as manage.py), among them:
  migrate                 apply the database migrations (run on every deploy, before the rest)
  create_api_key          create an API key for a backend
  housekeep               run one housekeeping pass now
  help                    list every management command

  --version               print the version
"""


def process_argv(name: str, args: Sequence[str]) -> list[str]:
    """Return the command line that runs the process ``name``, ``args`` appended."""
    from config.serve import beat_command, web_command, worker_command

    python, env = sys.executable, dict(os.environ)
    if name == "web":
        host = env.get("HOST", "127.0.0.1")
        argv = web_command(python, host, int(env.get("PORT", "8000")), env)
    elif name == "worker":
        argv = worker_command(python, env)
    else:
        argv = beat_command(python)
    return [*argv, *args]


def manage(argv: Sequence[str]) -> None:
    """Run a management command, the embedded server (if used) readied first."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    from config import local

    local.prepare()  # the embedded server, if used, before any command connects
    execute_from_command_line([PROG, *argv])


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``sherdlock`` command line; return its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args else ""
    if command in ("", "-h", "--help"):
        print(USAGE, end="")
        return 0 if command else 2
    if command == "--version":
        print(f"{PROG} {__version__}")
        return 0
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    if command not in ("serve", "web", "worker"):
        # Only the web server's and the worker's processes report metrics (/metrics sums their
        # files); a command's, or beat's, would be files of processes nobody marks dead, and a
        # command run before the directory is made would fail to write them.
        os.environ.pop(MULTIPROC_DIR, None)
    if command == "serve":
        from config import serve

        return serve.main()
    if command in PROCESSES:
        # The process takes this one's place: signals from a supervisor (systemd, Kubernetes)
        # reach gunicorn or Celery themselves, and its exit status is the command's.
        argv_ = process_argv(command, args[1:])
        os.execv(argv_[0], argv_)
    manage(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
