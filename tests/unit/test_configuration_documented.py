"""Every environment variable the service reads is in docs/configuration.md, and nothing else is.

The shipped packages are read as source: a variable is *read* where its name is the first
argument of ``os.environ.get``, ``os.getenv``, ``env.get`` (a copy of the environment), the
settings' ``env_bool``, ``env_list`` or ``rate_limit``, or a subscript of one of those mappings
that is not assigned to; the knobs add ``SHERDLOCK_<NAME>`` for each of theirs. A variable is
*documented* where it heads a row of a table in docs/configuration.md.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from common.knobs import environment_variables

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("config", "locks", "tokens", "clients", "common", "sherdlock")
CONFIGURATION = ROOT / "docs" / "configuration.md"

# Mappings that hold the process's environment where the code reads it.
ENVIRONMENTS = {"environ", "env", "environment"}
# Functions whose first argument names the variable they read.
READERS = {"getenv", "env_bool", "env_list", "rate_limit", "env_int", "env_seconds"}
NAME = re.compile(r"^[A-Z][A-Z0-9_]+$")
# Read by the programs the service runs in, not by its own code, and documented with its own.
READ_BY_LIBRARIES = {"FORWARDED_ALLOW_IPS"}  # gunicorn's trusted proxy addresses


def _is_environment(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in ENVIRONMENTS
    return isinstance(node, ast.Attribute) and node.attr in ENVIRONMENTS


def _first_name(call: ast.Call) -> str | None:
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value if NAME.match(call.args[0].value) else None
    return None


def read_variables(root: Path = ROOT) -> set[str]:
    """Return the environment variables the shipped packages read."""
    found: set[str] = set()
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call):
                    func = node.func
                    name = _first_name(node)
                    if name is None:
                        continue
                    if isinstance(func, ast.Attribute) and func.attr == "get":
                        if _is_environment(func.value):
                            found.add(name)
                    elif (isinstance(func, ast.Name) and func.id in READERS) or (
                        isinstance(func, ast.Attribute) and func.attr in READERS
                    ):
                        found.add(name)
                elif (
                    isinstance(node, ast.Subscript)
                    and isinstance(node.ctx, ast.Load)
                    and _is_environment(node.value)
                    and isinstance(node.slice, ast.Constant)
                    and isinstance(node.slice.value, str)
                    and NAME.match(node.slice.value)
                ):
                    found.add(node.slice.value)
    return found | set(environment_variables())


def documented_variables(text: str) -> set[str]:
    """Return the variables that head a table row of ``text``."""
    return set(re.findall(r"^\| `([A-Z][A-Z0-9_]+)` \|", text, flags=re.MULTILINE))


def test_every_variable_read_is_documented_and_every_documented_one_is_read():
    read = read_variables() | READ_BY_LIBRARIES
    documented = documented_variables(CONFIGURATION.read_text())
    assert not read - documented, f"read but not in docs/configuration.md: {read - documented}"
    assert not documented - read, f"in docs/configuration.md but never read: {documented - read}"


def test_the_scan_finds_each_way_of_reading_a_variable(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "x.py").write_text(
        "import os\n"
        "a = os.environ.get('ONE')\n"
        "b = os.environ['TWO']\n"
        "os.environ['WRITTEN'] = '1'\n"
        "env = dict(os.environ)\n"
        "c = env.get('THREE', 'x')\n"
        "d = env_bool('FOUR')\n"
        "e = os.getenv('FIVE')\n"
        "f = other.get('NOT_ONE')\n"
    )
    for package in PACKAGES[1:]:
        (tmp_path / package).mkdir()
    read = read_variables(tmp_path) - set(environment_variables())
    assert read == {"ONE", "TWO", "THREE", "FOUR", "FIVE"}


def test_table_rows_are_found_by_their_first_cell():
    text = "| variable | default |\n| --- | --- |\n| `DATABASE_URL` | embedded |\n| `x` | |\n"
    assert documented_variables(text) == {"DATABASE_URL"}
