"""How ``make test`` shares the suite between its pytest-xdist workers.

The end-to-end tests start replica processes, web servers or a server of their own and load
both cores: several at once would slow each other past their deadlines. They all go to one
worker at the start, to run there one after another, while the other workers take the unit
and integration tests a few at a time as pytest-xdist's ``load`` mode does.

A few long end-to-end tests hold no deadline of their own that a busy machine could miss: the
benchmark harness's tests (which assert counters, never timings) and the release test (a wheel
built and installed, its processes given minutes to come up). Left on the first worker they
would make its share the longest by far while the second one idles at the end; they go to the
second worker at the start instead, as one block, so that a module's shared fixture (the
harness run) is set up once. Each worker then takes unit and integration tests from the last
test of its block on, which evens out the two.

xdist's own ways of grouping do not serve here on pytest 9.2: ``loadgroup`` no longer sees
``xdist_group`` marks, and ``loadscope`` keys tests by node id, which runs one of the schema
fuzzer's tests (one per API operation, all under one node id) instead of all of them. This
keeps ``load``'s index-based bookkeeping and only decides who gets what.
"""

from __future__ import annotations

from xdist.scheduler import LoadScheduling
from xdist.workermanage import WorkerController

# The end-to-end tests, and the benchmark harness's own (which run the harness).
PINNED = ("tests/e2e/", "tests/bench/e2e/")
# The pinned tests with no deadline a concurrent test could make them miss: the second
# worker's block when there is a second worker.
APART = ("tests/bench/e2e/", "tests/e2e/test_release.py")


class EndToEndOnOneWorker(LoadScheduling):
    """``--dist load``, with every end-to-end test sent to the first two workers up front."""

    def schedule(self) -> None:
        if (
            self.collection is not None
            or len(self.nodes) < 2
            or not self._check_nodes_have_same_collection()
        ):
            super().schedule()
            return
        self.collection = next(iter(self.node2collection.values()))
        if self.maxschedchunk is None:
            self.maxschedchunk = len(self.collection)
        pinned = [i for i, nodeid in enumerate(self.collection) if nodeid.startswith(PINNED)]
        apart = [i for i in pinned if self.collection[i].startswith(APART)]
        first = [i for i in pinned if not self.collection[i].startswith(APART)]
        self.pending[:] = sorted(set(range(len(self.collection))) - set(pinned))
        for node, block in zip(self.nodes, (first, apart), strict=False):
            if block:
                self.node2pending[node].extend(block)
                node.send_runtest_some(block)
        for node in self.nodes:
            self.check_schedule(node)

    def check_schedule(self, node: WorkerController, duration: float = 0) -> None:
        # A worker running end-to-end tests takes nothing more until it is on the last of them.
        # Not until through them: a worker runs a test only once it has the next one (or is
        # told to shut down), so the last one would wait for the other workers to finish
        # everything else, and two workers each waiting on its block's last test would wait
        # for each other.
        assert self.collection is not None
        queued = self.node2pending[node]
        busy = len(queued) > 1 and any(self.collection[i].startswith(PINNED) for i in queued)
        if busy and self.pending:
            return
        super().check_schedule(node, duration)
