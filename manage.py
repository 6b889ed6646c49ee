#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    from config import local

    local.prepare()  # the embedded server, if used, before any command connects
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
