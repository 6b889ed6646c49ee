"""bench.worker.warm_up: one selection, released, before a point's clock starts."""

from __future__ import annotations

from bench.worker import Task, warm_up
from bench.workloads import Workload
from sherdlock import FundsLocked, WalletKey


class Picks:
    """A strategy that records what it is asked and what it is given back."""

    def __init__(self, fail: Exception | None = None, release_fails: int = 0) -> None:
        self.fail = fail
        self.release_fails = release_fails
        self.selected: list[tuple[str, WalletKey, int]] = []
        self.released: list[object] = []

    def select(self, tx_id: str, key: WalletKey, quantity: int) -> object:
        self.selected.append((tx_id, key, quantity))
        if self.fail is not None:
            raise self.fail
        return ("picked", tx_id)

    def release(self, picked: object) -> None:
        if self.release_fails:
            self.release_fails -= 1
            raise RuntimeError("deadlock detected")
        self.released.append(picked)


def task(tag: str = "") -> Task:
    workload = Workload("w", "a workload", ("a", "b"), 5, 9, currency="USD")
    return Task("ours", workload, replica=3, seed=1003, tag=tag)


def test_the_warm_up_selects_once_like_the_point_and_releases_it():
    strategy = Picks()
    warm_up(task(), strategy)
    [(tx_id, key, quantity)] = strategy.selected
    assert tx_id == "ours-3-warm"  # never one of the point's own ids (ours-3-1, ours-3-2, ...)
    assert key.wallet in ("a", "b") and key.currency == "USD"
    assert 5 <= quantity <= 9
    assert strategy.released == [("picked", "ours-3-warm")]


def test_the_warm_up_ids_carry_the_points_tag():
    strategy = Picks()
    warm_up(task(tag="hk-b"), strategy)
    assert strategy.selected[0][0] == "hk-b-3-warm"


def test_a_failed_warm_up_selection_is_ignored_and_releases_nothing():
    strategy = Picks(fail=FundsLocked(WalletKey("a", "USD"), 7, 0, retry_after=0.1))
    warm_up(task(), strategy)
    assert len(strategy.selected) == 1 and strategy.released == []


def test_a_release_that_fails_once_is_tried_again():
    strategy = Picks(release_fails=1)
    warm_up(task(), strategy)
    assert strategy.released == [("picked", "ours-3-warm")]
