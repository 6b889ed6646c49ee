"""Every error class of the project has its status and code in one table, found by hierarchy.

An error the table does not name is a 500; a new error class must be placed in the table (or
named as one no view lets out) before this module passes.
"""

from __future__ import annotations

import importlib
import inspect
import io
import pkgutil
import re
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from rest_framework import exceptions

from config.exceptions import ERRORS, NEVER_ANSWERED, SERVER_ERROR, resolve
from locks.errors import LeaseLost, SelectionError
from sherdlock import SherdlockError

PACKAGES = ("sherdlock", "common", "clients", "tokens", "locks", "config")
API_DOCS = Path(__file__).resolve().parents[3] / "docs" / "api.md"


def project_error_classes() -> set[type[BaseException]]:
    """Import every module of the project and return the exception classes defined in it."""
    found = set()
    for package in PACKAGES:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            if ".migrations" in info.name:
                continue
            module = importlib.import_module(info.name)
            found.update(
                obj
                for obj in vars(module).values()
                if inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
            )
    return found


def answered() -> set[tuple[int, str]]:
    return {(error.status, error.code) for error in ERRORS.values()}


class DeeperLeaseLost(LeaseLost):
    """A refinement of a mapped error."""


class UnplacedError(SelectionError):
    """An error nobody placed in the table."""


def test_the_project_defines_the_errors_the_tables_name():
    classes = project_error_classes()
    assert {LeaseLost, SherdlockError} <= classes
    ours = {cls for cls in (*ERRORS, *NEVER_ANSWERED) if cls.__module__.split(".")[0] in PACKAGES}
    assert ours <= classes


def test_every_error_class_of_the_project_is_answered_or_named_as_never_answered():
    unplaced = sorted(
        cls.__qualname__
        for cls in project_error_classes()
        if resolve(cls) is None and cls not in NEVER_ANSWERED
    )
    assert unplaced == []


def test_no_error_is_both_answered_and_never_answered():
    assert [cls for cls in NEVER_ANSWERED if resolve(cls) is not None] == []


def test_an_error_is_answered_by_its_nearest_named_class():
    assert resolve(DeeperLeaseLost) is ERRORS[LeaseLost]
    assert resolve(exceptions.NotFound) is ERRORS[exceptions.NotFound]
    assert resolve(UnplacedError) is None
    assert resolve(SherdlockError) is None


def test_drf_errors_keep_the_status_drf_gives_them():
    for cls, error in ERRORS.items():
        if issubclass(cls, exceptions.APIException):
            assert error.status == cls.status_code, cls


@pytest.mark.django_db
@pytest.mark.parametrize(
    "exc, status, code",
    [
        (DeeperLeaseLost("gone"), 409, "lease_lost"),
        (UnplacedError("nobody placed me"), SERVER_ERROR.status, SERVER_ERROR.code),
        (SherdlockError("odd"), SERVER_ERROR.status, SERVER_ERROR.code),
    ],
    ids=repr,
)
def test_clients_see_the_table(api, monkeypatch, exc, status, code):
    def fail(*args, **kwargs):
        raise exc

    monkeypatch.setattr("tokens.views.balances", fail)
    api.raise_request_exception = False
    response = api.get("/api/v1/wallets/alice/balances/")
    assert (response.status_code, response.json()["code"]) == (status, code)


def test_the_api_reference_lists_every_answered_error():
    text = API_DOCS.read_text()
    rows = set()
    for status, code in re.findall(r"^\| (\d{3}) \| `([a-z_]+)` \|", text, re.MULTILINE):
        rows.add((int(status), code))
    assert rows == answered() | {(SERVER_ERROR.status, SERVER_ERROR.code)}


@pytest.mark.django_db
def test_the_schema_names_only_codes_the_table_answers_with_that_status():
    out = io.StringIO()
    call_command("spectacular", stdout=out)
    described = set()
    for operations in yaml.safe_load(out.getvalue())["paths"].values():
        for operation in operations.values():
            for status, response in operation["responses"].items():
                if int(status) >= 400 and "content" in response:
                    for code in response["description"].split(","):
                        described.add((int(status), code.split("(")[0].strip()))
    assert described
    assert described - answered() == set()
