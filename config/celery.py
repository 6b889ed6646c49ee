"""The Celery application: workers run the housekeeping tasks that beat schedules."""

import os

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("sherdlock")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def _prepare(**_: object) -> None:
    """Ready the data directory (the embedded server, if used) before worker or beat connects."""
    from config import local

    local.prepare()


# Sent by the worker and by beat as they load the task modules, before either connects; not
# when a web process merely imports this app to send tasks.
signals.import_modules.connect(_prepare, sender=app, weak=False)
