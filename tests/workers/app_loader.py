"""Load every app as a management command or a Celery worker does, and never select.

``python -m tests.workers.app_loader`` sets Django up, runs ``check``, then prints two words:
whether this process has no cache listener, and whether a listener thread runs.
"""

from __future__ import annotations

import sys
import threading


def main() -> int:
    import django

    django.setup()
    from django.core.management import call_command

    from locks import replica

    call_command("check", verbosity=0)
    running = any(t.name == "sherdlock-listener" for t in threading.enumerate())
    print(replica.get_listener() is None, running)
    return 0


if __name__ == "__main__":
    sys.exit(main())
