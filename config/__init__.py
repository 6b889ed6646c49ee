"""Project wiring: settings, URLs, the Celery app, the embedded database and broker."""

from config.celery import app as celery_app

__all__ = ["celery_app"]
