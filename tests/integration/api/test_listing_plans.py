"""Plans of the token listings: one wallet's tokens, newest first, read through its index.

The primary key (id, wallet) leads with the id: walked backwards for one wallet's page it reads
the tokens of every wallet newer than that page. token_by_wallet (wallet, id) is the one index
that holds a wallet's tokens in id order, spent ones included; these tests keep the API's cursor
pages and the admin's search by wallet on it. Django's own statements are not prepared
(config.database): each is planned for its values, so the plan checked is the one EXPLAIN gives
for the query as the view sent it.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.factories import make_tokens
from tests.helpers.plans import nodes
from tokens.models import Token

pytestmark = pytest.mark.django_db

URL = "/api/v1/tokens/"


def token_reads(sql: str) -> list[tuple[str, str | None]]:
    """The reads of the token table in the plan of ``sql``, in plan order.

    A bitmap scan is named by the indexes its bitmap is built from (the bitmap index scans name
    no table: every index here is the token table's).
    """
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}")
        found = cursor.fetchone()[0]
    found = json.loads(found) if isinstance(found, str) else found
    return [
        (n["Node Type"], n.get("Index Name"))
        for n in nodes(found[0]["Plan"])
        if n.get("Relation Name") == "tokens_token" or n["Node Type"] == "Bitmap Index Scan"
    ]


def listing_sql(captured: CaptureQueriesContext, marker: str) -> str:
    (sql,) = [q["sql"] for q in captured.captured_queries if marker in q["sql"]]
    return sql


@pytest.fixture
def oldest_wallet_among_many():
    """alice's tokens, half of them spent, issued before those of 30 other wallets."""
    alice = make_tokens(300, wallet="alice")
    Token.objects.filter(pk__in=[t.pk for t in alice[::2]]).update(
        spent_by="pay", spent_at=timezone.now()
    )
    for n in range(30):
        make_tokens(300, wallet=f"other-{n}")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE tokens_token")


@pytest.mark.parametrize("query", ["", "&spent=true", "&spent=false", "&currency=USD"])
def test_a_wallets_token_pages_walk_the_wallet_index(api, oldest_wallet_among_many, query):
    first = api.get(f"{URL}?wallet=alice&page_size=20{query}")
    assert first.status_code == 200, first.json()
    with CaptureQueriesContext(connection) as captured:
        page = api.get(first.json()["next"])
    assert page.status_code == 200 and page.json()["results"]
    sql = listing_sql(captured, 'ORDER BY "tokens_token"."id" DESC')
    reads = token_reads(sql)
    # The page itself: an ordered walk of the wallet's entries, no sort of the wallet's tokens
    # and no walk of the primary key through the other wallets'. (The other reads look up the
    # spenders' outputs by identity: TokenQuerySet.with_spender_seen_by.)
    assert reads[0] == ("Index Scan", "token_by_wallet"), reads
    assert ("Seq Scan", None) not in reads and ("Index Scan", "tokens_token_pkey") not in reads


def test_the_admin_search_by_wallet_reads_the_wallet_index(admin_client, oldest_wallet_among_many):
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get("/admin/tokens/token/", {"q": "alice"})
    assert response.status_code == 200
    reads = token_reads(listing_sql(captured, '("tokens_token"."id" + 0) DESC'))
    assert ("Bitmap Index Scan", "token_by_wallet") in reads, reads
    assert ("Seq Scan", None) not in reads, reads
