"""Django settings for Sherdlock, read from the environment (12-factor).

``DATABASE_URL`` names a PostgreSQL server; unset, the project-local embedded server is used.
``DATABASE_POOLING=transaction`` says that ``DATABASE_URL`` goes through a transaction-pooling
proxy (PgBouncer); ``DATABASE_DIRECT_URL`` then names the same database without it, for the few
connections that need a session of their own (docs/scaling.md). ``config.database`` reads and
checks those URLs.
``CELERY_BROKER_URL`` names a broker; unset, the project-local embedded Redis is used.

Importing this module starts nothing and writes nothing (``config.local`` says who starts the
embedded server): it only reads the environment, checks it and says where things are.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.functional import lazy
from pythonjsonlogger.core import RESERVED_ATTRS

from clients.rates import parse_rate
from common.knobs import Knobs
from config import __version__, broker, database, embedded_db, local
from config.database import (
    database_pool_size,
    database_pooling,
    database_settings,
    direct_database_url,
    prepare_threshold,
)

DATA_DIR = local.DATA_DIR


def env_bool(name: str, default: bool = False) -> bool:
    """Read a boolean environment variable (1/true/yes/on)."""
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str) -> list[str]:
    """Read a comma-separated environment variable."""
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


# Production sets SECRET_KEY; a local run uses one generated into the data directory when
# first needed (config.local.secret_key), not when the settings are read.
SECRET_KEY = os.environ.get("SECRET_KEY") or lazy(local.secret_key, str)()
DEBUG = env_bool("DEBUG")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1],testserver")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "config.apps.SherdlockAdminConfig",  # django.contrib.admin with our admin.site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "rest_framework_api_key",
    "django_filters",
    "drf_spectacular",
    "django_celery_beat",
    "tokens",
    "locks",
    "clients",
]

MIDDLEWARE = [
    # Before everything, API-key calls included: every answer and log line has its request id.
    "config.request_id.RequestIdMiddleware",
    # Then: API-key calls under /api/v1/ take API_KEY_MIDDLEWARE instead of what follows.
    "config.middleware.ApiKeyRequests",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "config.middleware.LazyMessageMiddleware",  # Django's, storage built on first use
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, so that it sees exceptions of every view first.
    "config.middleware.DatabaseUnavailableMiddleware",
]

# What an API-key call under /api/v1/ goes through (config.middleware.ApiKeyRequests): the
# security headers, Django's URL checks and the database-outage answer; nothing of browsers'.
API_KEY_MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "config.middleware.DatabaseUnavailableMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # Every template ships inside its app (locks/templates, tokens/templates).
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# The timeouts and keepalives of every connection unless its URL sets them; the sessions of
# their own (common.sessions) read them here too.
CONNECTION_DEFAULTS = database.CONNECTION_DEFAULTS
DATABASE_POOLING = database_pooling(os.environ.get("DATABASE_POOLING"))
DATABASE_POOL_SIZE = database_pool_size(os.environ.get("DATABASE_POOL_SIZE"))
DATABASES = {
    "default": database_settings(
        os.environ.get("DATABASE_URL"), DATABASE_POOLING, DATABASE_POOL_SIZE
    )
}
# The embedded server's data directory when DATABASES uses it (config.local.prepare starts
# it), else None.
EMBEDDED_DATABASE_DIR = None if os.environ.get("DATABASE_URL") else embedded_db.DEFAULT_DATA_DIR
# Session-scoped features (LISTEN, the housekeeping guard) connect here instead of DATABASES
# when DATABASE_URL is transaction-pooled (common.sessions); None otherwise.
DATABASE_DIRECT_URL = direct_database_url(os.environ.get("DATABASE_DIRECT_URL"), DATABASE_POOLING)
DATABASES["default"].setdefault("TEST", {})
if test_name := os.environ.get("SHERDLOCK_TEST_DB"):
    # Lets several test runs share one server without dropping each other's database.
    DATABASES["default"]["TEST"]["NAME"] = test_name

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# The largest request body read (API JSON and admin forms): the largest valid request, 1000
# tokens or outputs with names of the longest allowed length, fits; more is refused (413)
# before it is parsed, so no client can make a process parse megabytes.
DATA_UPLOAD_MAX_MEMORY_SIZE = 2_621_440

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"  # created by config.local.prepare
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve admin assets straight from the apps when collectstatic has not run (tests, first start).
WHITENOISE_USE_FINDERS = True

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["common.filters.StrictFilterBackend"],
    "DEFAULT_RENDERER_CLASSES": ["config.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["config.parsers.JSONParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "config.negotiation.FirstRendererNegotiation",
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    # API keys first: its challenge makes missing credentials a 401. Sessions serve operators.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "clients.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["clients.permissions.HasRight"],
    "EXCEPTION_HANDLER": "config.exceptions.exception_handler",
}


def rate_limit(variable: str, default: str) -> str:
    """Read a rate limit from the environment, refusing one that does not parse."""
    value = os.environ.get(variable, default)
    try:
        parse_rate(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{variable}={value!r}: {exc}") from None
    return value


# Rolling limits on POST /api/v1/selections/ ("N/Ps": N per P seconds; "0" or "off" disables).
# The defaults sit above what one service can serve (docs/api.md, "Rate limits"): they stop a
# runaway client, never a normal one.
SHERDLOCK_RATE_LIMITS = {
    "selections_per_key": rate_limit("SHERDLOCK_RATE_SELECTIONS_PER_KEY", "120000/60s"),
    "selections_per_wallet": rate_limit("SHERDLOCK_RATE_SELECTIONS_PER_WALLET", "60000/60s"),
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Sherdlock API",
    "DESCRIPTION": "Select, lock, spend and release tokens across replicas without double spends.",
    "VERSION": __version__,
    "SERVE_INCLUDE_SCHEMA": False,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "config.schema.require_one_of_bodies",
    ],
    # Each strategy choice is used by a request of one currency and by one with legs: name it
    # once (locks.request_serializers).
    "ENUM_NAME_OVERRIDES": {
        "SelectRequestStrategyEnum": "locks.request_serializers.PLAIN_STRATEGIES",
        "ExactSelectRequestStrategyEnum": ["exact"],
        "ConsolidateSelectRequestStrategyEnum": ["consolidate"],
    },
}

# The service's knobs, each from SHERDLOCK_<NAME>; declared, defaulted and checked in
# common.knobs, documented in docs/configuration.md. Code reads them with knobs().
SHERDLOCK = Knobs.from_environ(
    os.environ, prepare_threshold=prepare_threshold(DATABASE_POOLING)
).setting()

LOG_LEVEL = os.environ.get("LOG_LEVEL", "INFO")


def log_format(value: str | None) -> str:
    """Read ``LOG_FORMAT``: "plain" (the default, for a terminal) or "json" (a line per event)."""
    text = (value or "plain").strip().lower()
    if text not in LOG_FORMATTERS:
        raise ImproperlyConfigured(
            f"LOG_FORMAT={value!r}: use 'json' for a JSON object per line, or 'plain'"
        )
    return text


# Both formats name the request (config.request_id); gunicorn's own lines take the same
# format (config.gunicorn), Celery's go through the root logger.
LOG_FORMATTERS: dict[str, dict[str, Any]] = {
    "plain": {
        "format": "%(asctime)s %(levelname)s %(process)d %(name)s [%(request_id)s]: %(message)s"
    },
    "json": {
        "()": "pythonjsonlogger.json.JsonFormatter",
        "fmt": "%(asctime)s %(levelname)s %(process)d %(name)s %(request_id)s %(message)s",
        "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        # Besides the record's own attributes, what Django puts in a record's extra for its own
        # use (the request object, its status line's time): not JSON, nor of use in a log.
        "reserved_attrs": [*RESERVED_ATTRS, "request", "server_time"],
    },
}
LOG_FORMAT = log_format(os.environ.get("LOG_FORMAT"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"default": LOG_FORMATTERS[LOG_FORMAT]},
    "filters": {
        "connection_loss": {"()": "config.outage.ConnectionLossFilter"},
        "request_id": {"()": "config.request_id.RequestIdFilter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "default",
            "filters": ["connection_loss", "request_id"],
        }
    },
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        "sherdlock": {"level": LOG_LEVEL},
        "tokens": {"level": LOG_LEVEL},
        "locks": {"level": LOG_LEVEL},
        "clients": {"level": LOG_LEVEL},
        "config": {"level": LOG_LEVEL},
    },
}

# Celery: the broker defaults to the embedded Redis that `make run` starts (config.broker).
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or broker.url(broker.DEFAULT_DIR)
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = TIME_ZONE
CELERY_BEAT_SCHEDULER = "config.beat:DatabaseScheduler"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
