"""Run the benchmark harness: ``python -m bench --help``."""

import sys

from bench.runner import main

# Replica processes are spawned: they import this module again and must not rerun the harness.
if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
