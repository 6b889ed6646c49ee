"""Schema-driven fuzzing: requests generated from the OpenAPI schema, sent to the real web server.

schemathesis tests every operation with the schema's boundary values (its coverage phase) and
with random cases, both valid (positive) and invalid (negative). A test fails on any 5xx, on a
response that breaks the schema (status, content type, body), on schema-valid data refused
with a 400 and on schema-invalid data accepted; afterwards the database's rows must keep every
invariant (tests/helpers/invariants.py). The default run is bounded to fit CI (random cases,
and every boundary case once); ``-m slow`` runs many more random cases.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import ignored_auth, positive_data_acceptance

from locks.request_serializers import MAX_WAIT_SECONDS
from tests.e2e.servers import WebServer, web_server
from tests.helpers.invariants import check_invariants
from tests.helpers.processes import child_env, database_url

# Declares that the tests need the test database (each runs in a transaction of its own that
# touches nothing); the data are seeded once, committed, by the module's server fixture.
pytestmark = pytest.mark.django_db

WALLETS = ["alice", "bob", "0"]
CURRENCIES = ["USD", "0"]
SELECTIONS = ["held", "spent", "released"]
# Refusals of schema-valid data for reasons no schema states: funds, a selection's state.
DOMAIN_REFUSALS = ["2xx", "3xx", "401", "403", "404", "409", "422", "429"]
# Refusals of schema-invalid data: schemathesis' defaults, and 413/414 for a body or a request
# line over the limits.
REJECTIONS = [
    "400",
    "401",
    "403",
    "404",
    "405",
    "406",
    "409",
    "413",
    "414",
    "415",
    "422",
    "428",
    "429",
]
QUICK = settings(
    max_examples=10, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
THOROUGH = settings(QUICK, max_examples=300)


@dataclass
class Target:
    server: WebServer
    key: str
    session: requests.Session


def seed() -> str:
    """Issue tokens and make selections in every state; return a key with every right."""
    from clients.models import ApiKey
    from locks.services import release_selection, select_tokens, spend_selection
    from tokens import supply
    from tokens.models import Token
    from tokens.services import TokenSpec

    minted = Token.objects.bulk_create(
        Token(
            tx_id=f"mint-{wallet}-{currency}",
            index=i,
            wallet=wallet,
            currency=currency,
            quantity=Decimal(q),
        )
        for wallet in WALLETS
        for currency in CURRENCIES
        for i, q in enumerate([1, 5, 50, 500])
    )
    supply.add(supply.unspent_by_currency(minted))  # as if issued: the summary must agree
    selections = {tx_id: select_tokens(tx_id, "alice", "USD", 1)[0] for tx_id in SELECTIONS}
    total = int(selections["spent"].total)
    spend_selection("spent", [TokenSpec("spent", 0, "bob", "USD", total)])
    release_selection("released")
    _, raw = ApiKey.objects.create_key(
        name="fuzz", all_wallets=True, can_issue=True, can_select=True, can_read=True
    )
    return raw


@pytest.fixture(scope="module")
def target(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Target]:
    """The web server on the test database, seeded; the database is emptied afterwards."""
    from django.core.management import call_command
    from django.db import connection

    from locks import replica

    with django_db_blocker.unblock():
        key = seed()
        env = child_env(database_url(connection.settings_dict))
    replica.reset()
    # Rate limits would answer 429 to most selections: the point is the API, not the limiter.
    env.update(SHERDLOCK_RATE_SELECTIONS_PER_KEY="off", SHERDLOCK_RATE_SELECTIONS_PER_WALLET="off")
    log = tmp_path_factory.mktemp("fuzz") / "web.log"
    try:
        with web_server(env, log) as server, requests.Session() as session:
            assert session.get(f"{server.base}/api/schema/?format=json").json() == openapi()
            yield Target(server, key, session)
        text = log.read_text(errors="replace")
        assert "Traceback" not in text, text[-5000:]
        # Whatever the cases issued, selected, spent or released, no invariant broke.
        with django_db_blocker.unblock():
            check_invariants(recorded_supply=True)
    finally:
        with django_db_blocker.unblock():
            call_command("flush", interactive=False, verbosity=0)


def openapi() -> dict:
    """Return the schema the server publishes at /api/schema/, generated in this process."""
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.renderers import OpenApiJsonRenderer

    return json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(public=True)))


def load(phases: list[str]):
    """Load the schema for schemathesis with its ``phases`` and our expected statuses."""
    return schemathesis.openapi.from_dict(
        openapi(),
        config=SchemathesisConfig.from_dict(
            {
                "phases": {
                    name: {"enabled": name in phases}
                    for name in ("examples", "coverage", "fuzzing", "stateful")
                },
                "checks": {
                    "positive_data_acceptance": {"expected-statuses": DOMAIN_REFUSALS},
                    "negative_data_rejection": {"expected-statuses": REJECTIONS},
                },
            }
        ),
    )


# Built when the module is collected (no server is needed for that), so that pytest gets one
# test per operation; the fixture checks that the server publishes this very schema. The quick
# run draws random cases only; the long one adds the coverage phase (every boundary value and
# violation the schema defines, and unexpected methods) and the check that authentication is
# enforced (which re-sends each successful request without and with forged credentials). The
# boundaries run is the long one without its many random cases: the coverage phase's cases are
# explicit examples, all tried whatever max_examples says, so it fits the default run.
quick = load(["examples", "fuzzing"])
thorough = load(["examples", "coverage", "fuzzing"])
boundaries = load(["coverage"])


def known_rule_refuses(case) -> bool:
    """Tell whether a rule the schema cannot state (distinct identities) refuses the body."""
    body = case.body if isinstance(case.body, dict) else {}
    rules = (("tokens", ("tx_id", "index")), ("outputs", ("index",)), ("legs", ("currency",)))
    for name, key in rules:
        items = body.get(name)
        if isinstance(items, list) and all(isinstance(item, dict) for item in items):
            identities = [tuple(repr(item.get(k)) for k in key) for item in items]
            if len(identities) != len(set(identities)):
                return True
    return False


def steer(case) -> None:
    """Point half the valid cases at seeded wallets and selections, so that some succeed."""
    rng = random.Random(repr(case.body) + repr(case.path_parameters))
    if isinstance(case.body, dict) and rng.random() < 0.5:
        for name, choices in (("wallet", WALLETS), ("currency", CURRENCIES)):
            if name in case.body:
                case.body[name] = rng.choice(choices)
    if case.path_parameters and "tx_id" in case.path_parameters and rng.random() < 0.5:
        case.path_parameters["tx_id"] = rng.choice(SELECTIONS)


def check(case, target: Target, thorough: bool = False) -> None:
    positive = case.meta is None or case.meta.generation.mode.is_positive
    if positive:
        steer(case)
    excluded = [] if thorough else [ignored_auth]
    if positive and known_rule_refuses(case):
        excluded.append(positive_data_acceptance)
    response = case.call_and_validate(
        base_url=target.server.base,
        session=target.session,
        excluded_checks=excluded,
        headers={"Authorization": f"Api-Key {target.key}"},
        timeout=MAX_WAIT_SECONDS + 30,  # a selection may wait that long for held funds
    )
    if positive_data_acceptance in excluded:  # refused for that rule, unless no selection
        assert response.status_code in (400, 404), response.text


@quick.parametrize()
@QUICK
def test_the_api_answers_what_its_schema_says(case, target):
    check(case, target)


@pytest.mark.slow
@thorough.parametrize()
@THOROUGH
def test_the_api_answers_what_its_schema_says_at_length(case, target):
    check(case, target, thorough=True)


@boundaries.parametrize()
@settings(QUICK, max_examples=1)
def test_the_api_answers_what_its_schema_says_at_its_boundaries(case, target):
    check(case, target, thorough=True)
