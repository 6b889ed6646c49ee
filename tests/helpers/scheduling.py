"""How ``make test`` shares the suite between its pytest-xdist workers.

The end-to-end tests start replica processes, web servers or a server of their own and load
both cores: several at once would slow each other past their deadlines. They all go to one
worker at the start, to run there one after another, while the other workers take the unit
and integration tests a few at a time as pytest-xdist's ``load`` mode does.

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


class EndToEndOnOneWorker(LoadScheduling):
    """``--dist load``, with every end-to-end test sent to the first worker up front."""

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
        self.pending[:] = sorted(set(range(len(self.collection))) - set(pinned))
        if pinned:
            first = self.nodes[0]
            self.node2pending[first].extend(pinned)
            first.send_runtest_some(pinned)
        for node in self.nodes:
            self.check_schedule(node)

    def check_schedule(self, node: WorkerController, duration: float = 0) -> None:
        # The worker running end-to-end tests takes nothing more until it is through them.
        assert self.collection is not None
        busy = any(self.collection[i].startswith(PINNED) for i in self.node2pending[node])
        if busy and self.pending:
            return
        super().check_schedule(node, duration)
