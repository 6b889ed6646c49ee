#!/usr/bin/env python
"""Django's command-line utility in a checkout: what the installed ``sherdlock`` command runs."""

import sys

from config.cli import manage

if __name__ == "__main__":
    manage(sys.argv[1:])
