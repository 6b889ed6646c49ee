"""The OpenAPI schema and the server agree: a value the schema admits is accepted, one it
refuses is refused, for every input on a set of edge cases (lengths, whitespace, control and
astral characters, leading zeros, the quantity bounds, page sizes, enum values)."""

from __future__ import annotations

import io
import json
import re

import jsonschema_rs
import pytest
from django.core.management import call_command

from tests.helpers.api import issue, select, token

pytestmark = pytest.mark.django_db

NAMES = [
    "a",
    "x" * 128,
    "x" * 129,
    "",
    " ",
    "   ",
    " a",
    "a ",
    "\u00a0",
    "a\u00a0b",
    "\u3000",
    "a\tb",
    "a\nb",
    "\n",
    "a\n",
    "\x7f",
    "a\x85",
    "\x9f",
    "\u200b",
    "\ufeff",
    "\u2028",
    "\u00e9t\u00e9",
    "\uff41",
    "\U0001f600" * 128,
    "\U0001f600" * 129,
    "a/b",
    "/",
    "%2F",
    "..",
    "a b",
    "C" * 32,
    "C" * 33,
]
QUANTITIES = [
    "1",
    "9",
    "10",
    "0",
    "00",
    "01",
    "007",
    "9" * 19,
    "1" + "0" * 19,
    "18446744073709551615",
    "18446744073709551614",
    "18446744073709551616",
    "19000000000000000000",
    "99999999999999999999",
    "1" + "0" * 20,
    "-1",
    "+1",
    " 1",
    "1 ",
    "1\n",
    "1.0",
    "1e3",
    "",
    "\u0661",
    "\uff11",
    1,
    None,
]
INDEXES = [0, 1, 2**31 - 1, 2**31, -1, "1", 1.0, True, None]
PAGE_SIZES = [
    "1",
    "1000",
    "0",
    "1001",
    "0010",
    "01000",
    "00000",
    "-1",
    "+5",
    " 5",
    "5 ",
    "1.0",
    "",
    "abc",
    "\u0665",
    "99999999999999999999",
]


@pytest.fixture(scope="module")
def schema(django_db_blocker) -> dict:
    out = io.StringIO()
    with django_db_blocker.unblock():
        call_command("spectacular", "--format", "openapi-json", stdout=out)
    return json.loads(out.getvalue())


def admits(subschema: dict, value: object) -> bool:
    return jsonschema_rs.validator_for(subschema).is_valid(value)


def component(schema: dict, name: str, field: str) -> dict:
    return schema["components"]["schemas"][name]["properties"][field]


def parameter(schema: dict, path: str, name: str, method: str = "get") -> dict:
    found = [p for p in schema["paths"][path][method]["parameters"] if p["name"] == name]
    return {**found[0]["schema"], **({"enum": found[0]["enum"]} if "enum" in found[0] else {})}


def as_query_value(subschema: dict, raw: str) -> object:
    """Read a query string value as its schema's type, as a client library would write it."""
    if subschema.get("type") == "integer" and re.fullmatch(r"-?[0-9]+", raw):
        return int(raw)
    return raw


@pytest.fixture
def ops(make_key, client_for):
    """A client whose key may use every wallet, and a selection to spend."""
    _, raw = make_key(wallets=[], all_wallets=True)
    client = client_for(raw)
    issue(client, token("m", 0, quantity="80"))
    select(client, "pay", "80")
    return client


def refused(response, field: str) -> bool:
    body = response.json()
    return response.status_code == 400 and field in body.get("fields", {})


def disagreements(cases) -> list:
    return [
        (value, schema_says, server_says)
        for value, schema_says, server_says in cases
        if schema_says != server_says
    ]


@pytest.mark.parametrize(
    "component_name, field, url, build, values",
    [
        ("SelectRequest", "tx_id", "/api/v1/selections/", "select", NAMES),
        ("SelectRequest", "wallet", "/api/v1/selections/", "select", NAMES),
        ("SelectRequest", "currency", "/api/v1/selections/", "select", NAMES),
        ("SelectRequest", "quantity", "/api/v1/selections/", "select", QUANTITIES),
        ("TokenSpec", "tx_id", "/api/v1/tokens/", "issue", NAMES),
        ("TokenSpec", "wallet", "/api/v1/tokens/", "issue", NAMES),
        ("TokenSpec", "currency", "/api/v1/tokens/", "issue", NAMES),
        ("TokenSpec", "quantity", "/api/v1/tokens/", "issue", QUANTITIES),
        ("TokenSpec", "index", "/api/v1/tokens/", "issue", INDEXES),
        ("Output", "wallet", "/api/v1/selections/pay/spend/", "spend", NAMES),
        ("Output", "currency", "/api/v1/selections/pay/spend/", "spend", NAMES),
        ("Output", "quantity", "/api/v1/selections/pay/spend/", "spend", QUANTITIES),
        ("Output", "index", "/api/v1/selections/pay/spend/", "spend", INDEXES),
        (
            "Extend",
            "seconds",
            "/api/v1/selections/pay/extend/",
            "extend",
            [1, 86400, 0, 86401, -1, 60.0, 1.5, "60", True, None, [60]],
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and not v.startswith("/") else None,
)
def test_body_fields(schema, ops, component_name, field, url, build, values):
    cases = []
    for n, value in enumerate(values):
        valid = {"tx_id": f"agree-{n}", "wallet": "w", "currency": "USD", "quantity": "1"}
        if build == "select":
            body, path = {**valid, field: value}, field
        elif build == "extend":
            body, path = {field: value}, field
        elif build == "issue":
            body, path = {"tokens": [{**valid, "index": 0, field: value}]}, f"tokens.0.{field}"
        else:
            output = {"index": 0, "wallet": "w", "currency": "USD", "quantity": "1", field: value}
            body, path = {"outputs": [output]}, f"outputs.0.{field}"
        response = ops.post(url, body, format="json")
        assert response.status_code < 500, response.content
        cases.append(
            (
                value,
                admits(component(schema, component_name, field), value),
                not refused(response, path),
            )
        )
    assert disagreements(cases) == []


@pytest.mark.parametrize(
    "url, name, values",
    [
        ("/api/v1/tokens/", "page_size", PAGE_SIZES),
        ("/api/v1/selections/", "page_size", PAGE_SIZES),
        ("/api/v1/locks/", "page_size", PAGE_SIZES),
        ("/api/v1/tokens/", "wallet", NAMES),
        ("/api/v1/tokens/", "currency", NAMES),
        ("/api/v1/tokens/", "spent", ["true", "false", "", "True", "1", "true "]),
        ("/api/v1/selections/", "wallet", NAMES),
        ("/api/v1/selections/", "currency", NAMES),
        ("/api/v1/selections/", "status", ["locked", "spent", "released", "", "LOCKED", "x"]),
        ("/api/v1/locks/", "wallet", NAMES),
        ("/api/v1/locks/", "currency", NAMES),
        ("/api/v1/locks/", "spender_tx_id", NAMES),
        ("/api/v1/locks/", "state", ["live", "expired", "", "Live", "dead"]),
        ("/api/v1/wallets/{wallet}/balances/", "currency", NAMES),
    ],
)
def test_query_parameters(schema, ops, url, name, values):
    subschema = parameter(schema, url, name)
    cases = []
    for value in values:
        response = ops.get(url.replace("{wallet}", "w"), {name: value})
        assert response.status_code < 500, response.content
        cases.append(
            (
                value,
                admits(subschema, as_query_value(subschema, value)),
                response.status_code == 200,
            )
        )
    assert disagreements(cases) == []


def test_path_parameters(schema, ops):
    """A tx_id the path admits can be selected and then read; one it refuses is never found."""
    subschema = parameter(schema, "/api/v1/selections/{tx_id}/", "tx_id")
    issue(ops, *[token("many", i, quantity="1") for i in range(len(NAMES))])
    cases = []
    for value in NAMES:
        created = select(ops, value, "1", expect=None)
        # The client quotes the path segment as any HTTP client would.
        from urllib.parse import quote

        read = ops.get(f"/api/v1/selections/{quote(value, safe='')}/")
        cases.append(
            (
                value,
                admits(subschema, value),
                created.status_code == 201 and read.status_code == 200,
            )
        )
    assert disagreements(cases) == []
