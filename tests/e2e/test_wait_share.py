"""Two clients waiting for held funds in one web worker: neither can take every wait slot.

A real server (one worker, four wait slots) on the test database, two API keys of their own
namespaces, each waiting for funds its own holder keeps. The steps synchronise on what the
database shows (``locks_waiter`` rows) and on the answers that came back.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
from django.db import connection

from tests.e2e.servers import web_server
from tests.helpers.processes import wait_for

SLOTS = 4
WAIT = 30  # seconds a waiting request offers: far longer than any step takes


class Client:
    """One API key's requests to the server."""

    def __init__(self, base: str, wallet: str) -> None:
        from clients.models import ApiKey

        _, self.raw = ApiKey.objects.create_key(
            name=wallet, wallets=[wallet], can_issue=True, can_select=True, can_read=True
        )
        self.base, self.wallet = base + "/api/v1", wallet
        self.answers: dict[str, tuple[int, dict]] = {}
        self.threads: list[threading.Thread] = []

    def __call__(self, path: str, body: dict, wait: int | None = None) -> tuple[int, dict]:
        headers = {"Authorization": f"Api-Key {self.raw}", "Content-Type": "application/json"}
        if wait is not None:
            headers["Prefer"] = f"wait={wait}"
        request = urllib.request.Request(
            self.base + path, data=json.dumps(body).encode(), method="POST", headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=WAIT + 30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def fund_and_hold(self, tokens: int) -> None:
        """Issue ``tokens`` tokens of 1 and hold them all (transaction "hold")."""
        minted = [
            {"tx_id": "mint", "index": i, "wallet": self.wallet, "currency": "USD", "quantity": "1"}
            for i in range(tokens)
        ]
        assert self("/tokens/", {"tokens": minted})[0] == 201
        assert self.select("hold", tokens)[0] == 201

    def select(self, tx_id: str, quantity: int, wait: int | None = None) -> tuple[int, dict]:
        body = {"tx_id": tx_id, "wallet": self.wallet, "currency": "USD", "quantity": str(quantity)}
        return self("/selections/", body, wait)

    def wait_in_background(self, tx_id: str) -> None:
        """Ask for 1, waiting up to WAIT seconds, from a thread of its own."""

        def run() -> None:
            self.answers[tx_id] = self.select(tx_id, 1, wait=WAIT)

        thread = threading.Thread(target=run, name=tx_id, daemon=True)
        thread.start()
        self.threads.append(thread)

    def release_hold(self) -> None:
        assert self("/selections/hold/release/", {})[0] == 200

    def join(self) -> None:
        for thread in self.threads:
            thread.join(WAIT + 30)
            assert not thread.is_alive(), f"{thread.name} never answered"


def waiters(wallet: str) -> int:
    """Return how many requests wait in the queue of ``wallet`` (the database's own rows)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM locks_waiter WHERE wallet = %s", [wallet])
        return cursor.fetchone()[0]


@pytest.mark.timeout(180)
def test_a_client_filling_its_share_of_the_wait_slots_leaves_one_for_another(
    subprocess_env, tmp_path
):
    # A worker of 16 threads or fewer lets half of them wait (locks.wait_slots.wait_slots).
    env = {**subprocess_env, "WEB_THREADS": str(2 * SLOTS)}
    with web_server(env, tmp_path / "web.log", workers=1) as server:
        greedy, other = Client(server.base, "greedy"), Client(server.base, "other")
        greedy.fund_and_hold(3)
        other.fund_and_hold(1)

        # As many waiting requests as the worker has slots: three of them take the greedy
        # client's share and wait; the last finds none for it and is answered at once.
        for i in range(SLOTS):
            greedy.wait_in_background(f"greedy-{i}")
        wait_for(
            lambda: waiters("greedy") + len(greedy.answers) == SLOTS,
            "every greedy request to wait or be answered",
        )
        assert waiters("greedy") == SLOTS - 1
        ((status, body),) = greedy.answers.values()
        assert (status, body["code"]) == (409, "funds_locked")

        # The other client still finds a slot: it waits for its funds and gets them.
        other.wait_in_background("other-0")
        wait_for(
            lambda: waiters("other") or other.answers, "the other request to wait or be answered"
        )
        assert other.answers == {} and waiters("other") == 1
        other.release_hold()
        other.join()
        assert other.answers["other-0"][0] == 201

        # The greedy client's waiters are served in turn once its own hold ends.
        greedy.release_hold()
        greedy.join()
        assert sorted(status for status, _ in greedy.answers.values()) == [201, 201, 201, 409]
