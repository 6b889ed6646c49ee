"""The OpenAPI schema generates without warnings and documents bodies and error codes."""

from __future__ import annotations

import io

import pytest
import yaml
from django.core.management import call_command

from common.rules import QUANTITY_PATTERN

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def schema() -> dict:
    out = io.StringIO()
    # --fail-on-warn turns any warning (an undocumented field, an untyped parameter) into an error.
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)
    return yaml.safe_load(out.getvalue())


def test_the_schema_validates_without_warnings(schema):
    assert schema["openapi"].startswith("3.")


@pytest.mark.parametrize(
    "path, method",
    [
        ("/api/v1/tokens/", "post"),
        ("/api/v1/tokens/", "get"),
        ("/api/v1/wallets/{wallet}/balances/", "get"),
        ("/api/v1/selections/", "post"),
        ("/api/v1/selections/", "get"),
        ("/api/v1/selections/{tx_id}/", "get"),
        ("/api/v1/selections/{tx_id}/spend/", "post"),
        ("/api/v1/selections/{tx_id}/release/", "post"),
        ("/api/v1/selections/{tx_id}/extend/", "post"),
        ("/api/v1/locks/", "get"),
        ("/healthz", "get"),
        ("/readyz", "get"),
        ("/api/v1/", "get"),
    ],
)
def test_every_endpoint_is_documented(schema, path, method):
    assert method in schema["paths"][path]


def test_request_bodies_errors_and_the_key_scheme_are_documented(schema):
    select = schema["paths"]["/api/v1/selections/"]["post"]
    body = select["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert body.endswith("/SelectRequestByStrategy")
    assert select["requestBody"]["required"] is True  # every shape requires fields
    shapes = schema["components"]["schemas"]["SelectRequestByStrategy"]["oneOf"]
    assert [shape["$ref"].rsplit("/", 1)[1] for shape in shapes] == [
        "SelectRequest",
        "ExactSelectRequest",
        "ConsolidateSelectRequest",
        "LegsSelectRequest",
        "ExactLegsSelectRequest",
        "ConsolidateLegsSelectRequest",
    ]
    legs = schema["components"]["schemas"]["LegsSelectRequest"]
    assert legs["required"] == ["legs", "tx_id", "wallet"]
    assert (legs["properties"]["legs"]["minItems"], legs["properties"]["legs"]["maxItems"]) == (
        2,
        8,
    )
    selection = schema["components"]["schemas"]["Selection"]["properties"]
    assert selection["legs"]["nullable"] is True
    assert {"201", "200", "400", "401", "403", "409", "429"} <= set(select["responses"])
    assert "funds_locked" in select["responses"]["409"]["description"]
    spend = schema["paths"]["/api/v1/selections/{tx_id}/spend/"]["post"]
    assert "422" in spend["responses"]
    components = schema["components"]
    quantity = components["schemas"]["SelectRequest"]["properties"]["quantity"]
    assert quantity == {
        "type": "string",
        "pattern": QUANTITY_PATTERN,
        "minLength": 1,
        "maxLength": 20,
        "example": "100",
        "description": quantity["description"],
    }
    assert set(components["schemas"]["Error"]["required"]) >= {"code", "detail", "fields"}
    assert components["securitySchemes"]["ApiKey"]["name"] == "Authorization"


def test_the_schema_and_docs_are_served(client):
    assert client.get("/api/schema/").status_code == 200
    docs = client.get("/api/docs/")
    assert docs.status_code == 200 and b"swagger" in docs.content.lower()
