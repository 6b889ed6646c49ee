"""A wallet with one token and many concurrent payments: they queue and all get through.

Every payment of 1 needs the one token the previous payment returned as change, so at most one
payment holds it at a time and the rest must wait their turn (``Prefer: wait``). Short by
default; ``-m slow`` runs the long variants.
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
from decimal import Decimal

import pytest
from django.db.models import Sum

from tests.e2e.servers import web_server
from tests.factories import make_token
from tests.helpers.replicas import (
    assert_books_balance,
    assert_never_held_twice,
    outcomes,
    run_replicas,
)
from tokens.models import Token


@pytest.mark.parametrize(
    "replicas,payments",
    [
        pytest.param(6, 3, id="short"),
        pytest.param(9, 10, id="long", marks=pytest.mark.slow),
    ],
)
def test_replicas_waiting_their_turn_complete_the_chain(
    tmp_path, subprocess_env, replicas, payments
):
    make_token(wallet="payer", quantity=100)
    records = run_replicas(
        tmp_path,
        subprocess_env,
        replicas,
        wallets=["payer"],
        selections=payments,
        min_quantity=1,
        max_quantity=1,
        spend_ratio=1,
        hold=0.002,
        wait=60,
        payee="shop",
    )
    assert outcomes(records) == {"selected": replicas * payments}
    assert_never_held_twice(records)
    assert_books_balance(records, Decimal(100))
    paid = replicas * payments
    balance = dict(
        Token.objects.unspent()
        .values("wallet")
        .annotate(s=Sum("quantity"))
        .values_list("wallet", "s")
    )
    assert balance == {"payer": 100 - paid, "shop": paid}
    # One token at a time: the payer's change is a single token after every spend.
    assert Token.objects.unspent().filter(wallet="payer").count() == 1


@pytest.mark.parametrize(
    "payments",
    [
        pytest.param(12, id="short"),
        pytest.param(60, id="long", marks=pytest.mark.slow),
    ],
)
@pytest.mark.timeout(300)
def test_http_clients_waiting_their_turn_complete_the_chain(subprocess_env, tmp_path, payments):
    from clients.models import ApiKey

    make_token(wallet="payer", quantity=100)
    _, key = ApiKey.objects.create_key(name="chain", wallets=["payer", "shop"], can_select=True)
    results: list[tuple[int, str, dict]] = []
    with web_server(subprocess_env, tmp_path / "web.log", workers=2) as server:
        base = server.base

        def post(path: str, body: dict, **headers: str) -> tuple[int, dict, dict]:
            request = urllib.request.Request(
                f"{base}/api/v1/selections/{path}",
                data=json.dumps(body).encode(),
                method="POST",
                headers={
                    "Authorization": f"Api-Key {key}",
                    "Content-Type": "application/json",
                    **headers,
                },
            )
            try:
                with urllib.request.urlopen(request, timeout=120) as response:
                    return response.status, lowered(response.headers), json.loads(response.read())
            except urllib.error.HTTPError as error:
                return error.code, lowered(error.headers), json.loads(error.read())

        def pay(n: int) -> None:
            tx_id = f"pay-{n}"
            rng = random.Random(n)
            for _ in range(100):
                # A client that could not wait here (the server had no room) retries after
                # the hint, with jitter, as sherdlock_client does.
                status, headers, body = post(
                    "",
                    {"tx_id": tx_id, "wallet": "payer", "currency": "USD", "quantity": "1"},
                    Prefer="wait=60",
                )
                if status != 409 or body["code"] != "funds_locked":
                    break
                time.sleep(body["retry_after"] * rng.uniform(0.5, 1.5))
            if status == 201:
                change = int(body["total"]) - 1
                outputs = [{"index": 0, "wallet": "shop", "currency": "USD", "quantity": "1"}]
                if change:
                    outputs.append(
                        {"index": 1, "wallet": "payer", "currency": "USD", "quantity": str(change)}
                    )
                status, _, body = post(f"{tx_id}/spend/", {"outputs": outputs})
            results.append((status, headers.get("preference-applied", ""), body))

        threads = [threading.Thread(target=pay, args=(n,)) for n in range(payments)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(200)
    assert [status for status, _, _ in results] == [200] * payments, results
    assert "wait=60" in {applied for _, applied, _ in results}
    assert Token.objects.unspent().filter(wallet="shop").count() == payments
    assert Token.objects.unspent().get(wallet="payer").quantity == 100 - payments


def lowered(headers) -> dict[str, str]:
    """Index an answer's header fields by lower-cased name (field names are case-insensitive)."""
    return {name.lower(): value for name, value in headers.items()}
