"""Project wiring: settings, URLs, the Celery app, the embedded database and broker."""

# The release: the package's metadata (pyproject.toml reads it here), the OpenAPI schema and
# `sherdlock --version` all say this one.
__version__ = "1.2.0"

from config.celery import app as celery_app

__all__ = ["__version__", "celery_app"]
