"""WSGI entry point (gunicorn config.wsgi)."""

import os

from django.core.wsgi import get_wsgi_application

from config import local

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
local.prepare()  # the embedded server, if used, before the first request connects

application = get_wsgi_application()

from common.postgres import base  # noqa: E402  # after Django is set up

base.serve()  # this process serves requests: a statement timeout on its sessions
