"""The locking statements read top to bottom: few variants, each a list of whole fragments.

Every variant is rendered here; tests/integration/test_partition_pruning.py runs each one
prepared, under a generic and a custom plan, and checks it touches one partition.
"""

from __future__ import annotations

import re

import pytest

from locks.sql import batches, locking

CTE = re.compile(r"^(\w+) AS (?:MATERIALIZED )?\(", re.MULTILINE)
PARAMETER = re.compile(r"%\((\w+)\)s")


def ctes(statement: str) -> list[str]:
    return CTE.findall(statement)


def test_every_choice_flag_and_mode_has_one_variant_and_no_more():
    names = [str(variant) for variant in locking.VARIANTS]
    assert len(names) == len(set(names)) == len(locking.LOCK_STATEMENTS) == 32
    # Three fetches (random, ascending, descending), each contested or not, a cold key's random
    # fetch, and the given ids, each recording or not and metered or not. The random fetches of
    # a cold and of a contested key read from the wallet's front; a warm key's from a pivot.
    assert len([v for v in locking.VARIANTS if v.fetch]) == (3 * 2 + 1) * 2 * 2
    front = {(v.choice, v.contested) for v in locking.VARIANTS if v.front}
    assert front == {("random", False), ("random", True)}


@pytest.mark.parametrize("variant", locking.VARIANTS, ids=str)
def test_a_statement_is_its_fragments_in_order_each_read_after_it_is_made(variant):
    statement = locking.LOCK_STATEMENTS[variant]
    assert statement == variant.sql()
    assert "{" not in statement and "}" not in statement  # every placeholder filled
    names = ctes(statement)
    assert len(names) == len(set(names)), names
    # Each fragment appears whole, in the order LockStatement.fragments lists it.
    position = 0
    for fragment in variant.fragments():
        found = statement.find(fragment.rstrip(","), position)
        assert found >= position, fragment[:60]
        position = found
    # Every CTE is read by a later part of the statement: none is there for nothing. (The
    # commit mode is read by the fence, the fence by the lock rows it stamps.)
    for name in names:
        later = statement[statement.index(f"\n{name} AS") + len(name) + 4 :]
        assert re.search(rf"\b{name}\b", later), f"{variant}: {name} is never read"


@pytest.mark.parametrize("variant", locking.VARIANTS, ids=str)
def test_what_a_variant_does_shows_in_its_text(variant):
    statement = locking.LOCK_STATEMENTS[variant]
    names = ctes(statement)
    assert names[:2] == ["commit_mode", "fence"]
    assert ("asked" in names) == variant.metered
    assert ("gate" in names and "recorded" in names) == variant.record
    # A warm key's random fetch walks from a random pivot; a cold or a contested key's reads
    # from the wallet's front.
    assert ("pivot" in names) == (variant.choice == "random" and not variant.front)
    # Every variant row-locks the tokens it chose in one place, skipping rows being locked,
    # then inserts their lock rows.
    assert statement.count("FOR UPDATE OF t SKIP LOCKED") == 1
    assert names.index("chosen") < names.index("wanted") < names.index("granted")
    # The commit mode and (recording) the strategy are parameters, as is a fetch's spare, but
    # for a cold key's, which answers none.
    parameters = set(PARAMETER.findall(statement))
    assert "synchronous_commit" in parameters
    assert ("strategy" in parameters) == variant.record
    cold = variant.choice == "random" and variant.front and not variant.contested
    assert (
        ("spare" in parameters)
        == ("s.ids AS spare_ids" in statement)
        == (variant.fetch and not cold)
    )
    assert ("AS spare_ids" in statement) == variant.fetch
    # A contested fetch yields to the key's turn when asked to (sherdlock.turns).
    assert ("turn" in names and "yield_to_turn" in parameters) == variant.contested


def test_unknown_choices_contested_try_locks_and_ordered_fetches_from_the_front_are_refused():
    with pytest.raises(ValueError, match="choice"):
        locking.LockStatement("largest")
    with pytest.raises(ValueError, match="no kind"):
        locking.LockStatement("given", contested=True)
    with pytest.raises(ValueError, match="no kind"):
        locking.LockStatement("ascending", front=True)
    # A contested key's replicas queue none of what they read: a pivot would buy them nothing.
    with pytest.raises(ValueError, match="no kind"):
        locking.LockStatement("random", contested=True)


def test_the_fragments_are_whole_statements_parts_not_cut_from_each_other():
    # Each choice's fragments stand on their own: no fragment holds another's text.
    fragments = [
        batches.GIVEN,
        batches.RANDOM_BATCH,
        batches.FRONT_BATCH,
        *batches.ORDERED_BATCH.values(),
        batches.RANDOM_REACH,
        batches.ORDERED_REACH,
        batches.PREFIX,
    ]
    for one in fragments:
        for other in fragments:
            if one is not other:
                assert one.strip(",\n") not in other
