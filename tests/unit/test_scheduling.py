"""``make test``'s scheduler: the end-to-end tests in two blocks, one per worker, every test run."""

from __future__ import annotations

from types import SimpleNamespace

from tests.helpers.scheduling import EndToEndOnOneWorker

# End-to-end tests among the others, as pytest orders them by fixture, and items that share a
# node id (the schema fuzzer's, one per API operation), each of which must run.
COLLECTION = [
    nodeid
    for n in range(12)
    for nodeid in (
        f"tests/unit/test_cache.py::test_{n}",
        f"tests/e2e/test_chain.py::test_{n}",
        f"tests/integration/test_store.py::test_{n}",
        f"tests/bench/e2e/test_harness.py::test_{n}",
        f"tests/bench/test_check.py::test_{n}",
        "tests/e2e/test_fuzz.py::test_schema",
    )
]
# The benchmark harness's end-to-end tests: the second worker's block.
APART = {i for i, nodeid in enumerate(COLLECTION) if nodeid.startswith("tests/bench/e2e/")}
# The other end-to-end tests: the first worker's.
E2E = {i for i, nodeid in enumerate(COLLECTION) if nodeid.startswith("tests/e2e/")}


class Config:
    def __init__(self, workers: int) -> None:
        self.options = {"tx": [f"{workers}*popen"], "maxschedchunk": None}

    def getvalue(self, name: str) -> object:
        return self.options[name]

    getoption = getvalue


class Worker:
    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def scheduled(workers: int) -> tuple[EndToEndOnOneWorker, list[Worker]]:
    """A scheduler that has handed COLLECTION its first tests on `workers` workers."""
    scheduler = EndToEndOnOneWorker(Config(workers))  # type: ignore[arg-type]
    nodes = [Worker(f"gw{n}") for n in range(workers)]
    for node in nodes:
        scheduler.add_node(node)  # type: ignore[arg-type]
        scheduler.add_node_collection(node, COLLECTION)  # type: ignore[arg-type]
    scheduler.schedule()
    return scheduler, nodes


def runnable(node: Worker, done: int) -> bool:
    """Whether the worker can run its next test: as xdist's worker does, only once it has the
    one after it, or has been told to shut down."""
    return len(node.sent) > done + 1 or (node.shutting_down and len(node.sent) > done)


def run(workers: int) -> list[Worker]:
    """Run COLLECTION on `workers` workers, each completing its tests in the order sent."""
    scheduler, nodes = scheduled(workers)
    done = dict.fromkeys(nodes, 0)
    while scheduler.has_pending:
        ready = [n for n in nodes if runnable(n, done[n])]
        assert ready, "every worker waits for a test that is never sent"
        # The worker that has finished fewest tests finishes its next one.
        node = min(ready, key=lambda n: done[n])
        scheduler.mark_test_complete(node, node.sent[done[node]])  # type: ignore[arg-type]
        done[node] += 1
    return nodes


def test_each_block_of_end_to_end_tests_goes_to_one_worker_and_every_test_runs_once():
    first, second = run(2)
    assert set(first.sent) >= E2E and not E2E & set(second.sent)
    assert set(second.sent) >= APART and not APART & set(first.sent)
    assert sorted(first.sent + second.sent) == list(range(len(COLLECTION)))
    assert first.shutting_down and second.shutting_down


def test_each_worker_takes_nothing_else_until_it_is_on_the_last_test_of_its_block():
    scheduler, (first, second) = scheduled(2)
    assert set(first.sent) == E2E and set(second.sent) == APART and scheduler.pending
    for node, block in ((first, E2E), (second, APART)):
        for index in sorted(block)[:-2]:
            scheduler.mark_test_complete(node, index)  # type: ignore[arg-type]
            assert set(node.sent) == block, "sent more before its block was done"
        # On the last one, which it runs only once it has a test to follow it.
        scheduler.mark_test_complete(node, sorted(block)[-2])  # type: ignore[arg-type]
        assert set(node.sent) > block  # then it shares the rest
    assert not E2E & set(second.sent) and not APART & set(first.sent)


def test_one_worker_runs_everything():
    (only,) = run(1)
    assert sorted(only.sent) == list(range(len(COLLECTION)))
    assert only.shutting_down
