"""Celery beat's scheduler: django-celery-beat's, keeping its schedule while the database is away.

django-celery-beat re-reads the whole schedule every few minutes, and at once when it changes.
Its other database reads survive an error (logged, retried at the next tick), but this one
raises out of beat's loop and beat exits: a database lost at the wrong moment (a failover) would
stop every periodic task until someone restarts beat. Here the read keeps the schedule beat
has, and the next read, at the next change or forced re-read, gets the new one.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError, InterfaceError
from django_celery_beat import schedulers  # type: ignore[import-untyped]  # ships no types

logger = logging.getLogger(__name__)


class DatabaseScheduler(schedulers.DatabaseScheduler):  # type: ignore[misc]  # untyped package
    """django-celery-beat's scheduler; a failed re-read of the schedule keeps the last one."""

    def all_as_schedule(self) -> dict[str, Any]:
        try:
            return dict(super().all_as_schedule())
        except (DatabaseError, InterfaceError) as exc:
            if self._schedule is None:
                raise  # at start-up there is no schedule to keep: fail loudly
            logger.warning("could not re-read the schedule, keeping the last one: %s", exc)
            return dict(self._schedule)
