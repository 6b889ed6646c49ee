"""Fences under a wait: an operation that waited for its selection's row judges the holder then.

A spend, extension or release of a selection first takes the selection's row, so it waits for
any other operation on the same selection (a concurrent extension, release or repeated spend;
here another session holding the row FOR UPDATE). Meanwhile the lease can run out and another
selection can take the tokens over and commit. The operation must then find the holder as it
is once it holds the lock rows, not as its statement's start saw it: a stale holder is refused.

Each case runs the operation in a process of its own (``tests.workers.lifecycle_call``) against
the test database, blocks it on the selection's row, waits until PostgreSQL shows it waiting
for that lock and until the database clock has passed the lease, and only then lets it go.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime

import psycopg
import pytest

from locks.models import Selection, TokenLock
from locks.selections import spend_selection
from locks.services import select_tokens
from tests.factories import make_tokens
from tests.helpers.processes import ROOT, wait_for
from tokens.models import Token
from tokens.services import TokenSpec

pytestmark = pytest.mark.timeout(120)

# Lease left to the selection when its operation is let go: long enough for the operation's
# statement to start (and take its snapshot) while the lease runs, which each case checks; the
# case then waits it out on the database clock.
LEASE_LEFT = 3.0


class Blocked:
    """An operation in a process of its own, let go when the selection's row is held."""

    def __init__(self, env: dict[str, str], operation: str, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.workers.lifecycle_call", operation, *args],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin, self.stdout = self.process.stdin, self.process.stdout
        word, pid = self.stdout.readline().split()
        assert word == "ready"
        self.pid = int(pid)

    def go(self) -> None:
        self.stdin.write("go\n")
        self.stdin.flush()

    def outcome(self) -> str:
        line = self.stdout.readline()
        assert self.process.wait(timeout=30) == 0 and line, "the operation's process failed"
        return json.loads(line)["outcome"]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def sessions(db_url) -> Iterator[tuple[psycopg.Connection, psycopg.Connection]]:
    """Two sessions of their own: one to hold the selection's row, one to look on."""
    blocker = psycopg.connect(db_url, autocommit=True)
    observer = psycopg.connect(db_url, autocommit=True)
    try:
        yield blocker, observer
    finally:
        blocker.close()
        observer.close()


def run_after_lapse(
    env: dict[str, str],
    sessions: tuple[psycopg.Connection, psycopg.Connection],
    operation: str,
    *args: str,
    takeover: bool,
) -> str:
    """Run ``operation`` on tx-old, held up on its row until its lease ran out; return the
    outcome. With ``takeover``, tx-new selects the same tokens meanwhile."""
    blocker, observer = sessions
    blocked = Blocked(env, operation, "tx-old", *args)
    try:
        (expiry,) = observer.execute(
            """UPDATE locks_tokenlock
               SET expires_at = clock_timestamp() + %s * interval '1 second'
               WHERE spender_tx_id = 'tx-old' RETURNING expires_at""",
            (LEASE_LEFT,),
        ).fetchone()
        observer.execute(
            "UPDATE locks_selection SET expires_at = %s WHERE tx_id = 'tx-old'", (expiry,)
        )
        blocker.execute("BEGIN")
        blocker.execute("SELECT id FROM locks_selection WHERE tx_id = 'tx-old' FOR UPDATE")
        blocked.go()
        started = wait_for(lambda: _waiting_since(observer, blocked.pid), "the operation to wait")
        assert started < expiry, "the operation started after the lease ran out: not forced"
        wait_for(
            lambda: observer.execute("SELECT clock_timestamp() > %s", (expiry,)).fetchone()[0],
            "the lease to run out",
            timeout=LEASE_LEFT + 10,
        )
        if takeover:
            old = Selection.objects.get(tx_id="tx-old")
            new, _ = select_tokens("tx-new", "alice", "USD", 20)
            assert sorted(new.token_ids) == sorted(old.token_ids)  # every token taken over
        blocker.execute("ROLLBACK")
        return blocked.outcome()
    finally:
        blocked.stop()


def _waiting_since(observer: psycopg.Connection, pid: int) -> datetime | None:
    """Return when ``pid``'s statement started, once it waits for a lock."""
    row = observer.execute(
        "SELECT wait_event_type, query_start FROM pg_stat_activity WHERE pid = %s", (pid,)
    ).fetchone()
    return row[1] if row and row[0] == "Lock" else None


@pytest.fixture
def selected(db_url) -> Selection:
    """tx-old holding both of alice's tokens."""
    make_tokens(2, quantity=10)
    selection, _ = select_tokens("tx-old", "alice", "USD", 20)
    assert selection.total == 20 and len(selection.token_ids) == 2
    return selection


def holders() -> dict[int, str]:
    return dict(TokenLock.objects.values_list("token_id", "spender_tx_id"))


def pay(tx_id: str) -> TokenSpec:
    return TokenSpec(tx_id=tx_id, index=0, wallet="bob", currency="USD", quantity=20)


def test_a_spend_that_waited_while_its_tokens_were_taken_over_is_refused(
    selected, sessions, subprocess_env
):
    outcome = run_after_lapse(subprocess_env, sessions, "spend", "20", takeover=True)
    assert outcome == "LeaseLost"
    assert not Token.objects.filter(spent_at__isnull=False).exists()
    assert holders() == dict.fromkeys(selected.token_ids, "tx-new")
    assert Selection.objects.get(tx_id="tx-old").status == Selection.Status.LOCKED
    # The new holder's hold is whole: it spends.
    assert spend_selection("tx-new", [pay("tx-new")]).selection.status == Selection.Status.SPENT
    assert set(Token.objects.filter(spent_by="tx-new").values_list("id", flat=True)) == set(
        selected.token_ids
    )


def test_a_spend_whose_lease_ran_out_while_it_waited_is_refused(selected, sessions, subprocess_env):
    outcome = run_after_lapse(subprocess_env, sessions, "spend", "20", takeover=False)
    assert outcome == "LeaseLost"
    assert not Token.objects.filter(spent_at__isnull=False).exists()
    assert holders() == dict.fromkeys(selected.token_ids, "tx-old")
    new, _ = select_tokens("tx-new", "alice", "USD", 20)  # the lapsed lease is free to take
    assert sorted(new.token_ids) == sorted(selected.token_ids)


def test_an_extension_whose_lease_ran_out_while_it_waited_is_refused(
    selected, sessions, subprocess_env
):
    outcome = run_after_lapse(subprocess_env, sessions, "extend", takeover=False)
    assert outcome == "LeaseLost"
    new, _ = select_tokens("tx-new", "alice", "USD", 20)  # not renewed: free to take
    assert sorted(new.token_ids) == sorted(selected.token_ids)


def test_an_extension_that_waited_while_its_tokens_were_taken_over_is_refused(
    selected, sessions, subprocess_env
):
    outcome = run_after_lapse(subprocess_env, sessions, "extend", takeover=True)
    assert outcome == "LeaseLost"
    assert holders() == dict.fromkeys(selected.token_ids, "tx-new")
    assert spend_selection("tx-new", [pay("tx-new")]).selection.status == Selection.Status.SPENT


def test_a_release_that_waited_while_its_tokens_were_taken_over_frees_none_of_them(
    selected, sessions, subprocess_env
):
    outcome = run_after_lapse(subprocess_env, sessions, "release", takeover=True)
    assert outcome == "ok"
    assert Selection.objects.get(tx_id="tx-old").status == Selection.Status.RELEASED
    assert holders() == dict.fromkeys(selected.token_ids, "tx-new")
    assert spend_selection("tx-new", [pay("tx-new")]).selection.status == Selection.Status.SPENT
