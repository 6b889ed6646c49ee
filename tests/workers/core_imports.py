"""Import modules of the core in a fresh interpreter and list everything that got loaded.

``python -m tests.workers.core_imports MODULE...`` prints the sorted names of ``sys.modules``
as one JSON list, so the test can tell whether the core pulls in a framework.
"""

from __future__ import annotations

import importlib
import json
import sys


def main(argv: list[str]) -> int:
    for name in argv:
        importlib.import_module(name)
    print(json.dumps(sorted(sys.modules)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
