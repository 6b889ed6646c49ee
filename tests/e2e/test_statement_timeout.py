"""A served web process cancels its statements after SHERDLOCK_STATEMENT_TIMEOUT: a 503.

The statement waits for the token table, which the test holds in another session: without the
timeout the request would wait for as long as the table is held.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import psycopg
import pytest

from tests.e2e.servers import web_server
from tests.e2e.test_serve import wait_for


def get(url: str, key: str) -> tuple[int, dict, dict[str, str]]:
    """GET ``url`` with the API key; return status, JSON body and headers."""
    request = urllib.request.Request(url, headers={"Authorization": f"Api-Key {key}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), dict(error.headers)


@pytest.mark.timeout(120)
def test_a_served_statement_past_its_timeout_answers_503(subprocess_env, db_url, tmp_path):
    from clients.models import ApiKey

    _, raw = ApiKey.objects.create_key(name="e2e", wallets=["alice"], can_read=True)
    env = {**subprocess_env, "SHERDLOCK_STATEMENT_TIMEOUT": "0.5"}
    with web_server(env, tmp_path / "web.log", workers=1) as served:
        assert wait_for(f"{served.base}/readyz", timeout=10) == 200
        url = f"{served.base}/api/v1/wallets/alice/balances/"
        with psycopg.connect(db_url, autocommit=True) as holder:
            holder.execute("BEGIN")
            holder.execute("LOCK TABLE tokens_token IN ACCESS EXCLUSIVE MODE")
            status, body, headers = get(url, raw)
            holder.execute("ROLLBACK")
        assert (status, body["code"]) == (503, "database_busy")
        assert headers["Retry-After"] == "1"
        # The connection it was cancelled on serves the next request.
        assert get(url, raw)[0] == 200
        assert "Traceback" not in served.log_text()
