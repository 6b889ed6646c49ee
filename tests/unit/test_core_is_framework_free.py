"""The core package must stay importable without Django, DRF, Celery, psycopg or Prometheus."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "sherdlock"
FORBIDDEN = ("django", "rest_framework", "celery", "psycopg", "psycopg2", "prometheus_client")


def module_names() -> list[str]:
    names = ["sherdlock"]
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name != "__init__.py":
            relative = path.relative_to(PACKAGE.parent).with_suffix("")
            names.append(".".join(relative.parts))
    return names


def imported_roots(source: str) -> set[str]:
    """Return the top-level modules a source file imports absolutely."""
    roots = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def is_forbidden(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in FORBIDDEN)


def test_package_has_the_expected_modules():
    assert {"sherdlock.selector", "sherdlock.cache", "sherdlock.memory"} <= set(module_names())


def test_importing_the_core_loads_no_framework():
    done = subprocess.run(
        [sys.executable, "-m", "tests.workers.core_imports", *module_names()],
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded = json.loads(done.stdout)
    assert "sherdlock.selector" in loaded
    assert [m for m in loaded if is_forbidden(m)] == []


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: p.name)
def test_core_imports_only_the_standard_library(path):
    roots = imported_roots(path.read_text())
    assert roots - set(sys.stdlib_module_names) - {"sherdlock", "__future__"} == set()


def test_scanner_catches_framework_imports():
    source = "import os\nfrom django.db import models\nimport celery.app\nfrom . import x\n"
    roots = imported_roots(source)
    assert roots == {"os", "django", "celery"}
    assert {r for r in roots if is_forbidden(r)} == {"django", "celery"}
    assert is_forbidden("psycopg.pq") and not is_forbidden("djangoish")


def test_lines_and_module_sizes_stay_small():
    for path in PACKAGE.rglob("*.py"):
        lines = path.read_text().splitlines()
        assert len(lines) < 400, f"{path.name} has {len(lines)} lines; split it"
