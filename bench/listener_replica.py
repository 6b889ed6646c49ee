"""One replica process of ``bench.listener_effect``: select, hold, then spend or release.

Started by ``bench.listener_effect.run_once`` as ``python -m bench.listener_replica --worker ...``
with that benchmark's arguments; writes one JSON report.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from bench.listener_effect import CURRENCY, READY_TIMEOUT, WALLET, parse_args


def worker(args: argparse.Namespace) -> None:
    """Select, hold, then spend or release, `args.selections` times; write one JSON report."""
    import django

    django.setup()
    from django.db import transaction
    from django.utils import timezone

    from locks import replica
    from sherdlock import FundsLocked, InsufficientFunds
    from tokens.models import Token

    selector = replica.get_selector()
    # The selector keeps its store private; its round_trips counter is what is measured.
    store = selector._store
    listener = replica.get_listener()
    if listener is not None and not listener.wait_connected(READY_TIMEOUT):
        raise SystemExit("the cache listener did not connect")
    Path(args.report + ".ready").touch()
    go = Path(args.go)
    while not go.exists():
        time.sleep(0.005)

    rng = random.Random(args.seed)
    rows = []
    cpu = time.process_time()  # every thread of this process, the listener's included
    for n in range(args.selections):
        tx_id = f"{args.name}-{n}"
        quantity = rng.randint(1, args.max_request)
        trips = store.round_trips
        started = time.perf_counter()
        try:
            picked = selector.select(tx_id, WALLET, CURRENCY, quantity)
        except (FundsLocked, InsufficientFunds) as exc:
            rows.append({"outcome": type(exc).__name__, "round_trips": store.round_trips - trips})
            continue
        latency = time.perf_counter() - started
        s = picked.stats
        rows.append(
            {
                "outcome": "selected",
                "round_trips": store.round_trips - trips,
                "latency": latency,
                "tokens": len(picked.tokens),
                "fetches": s.fetches,
                "lock_attempts": s.lock_attempts,
                "lock_conflicts": s.lock_conflicts,
                "cache_hits": s.cache_hits,
            }
        )
        time.sleep(rng.uniform(0, args.hold))
        if rng.random() < args.spend_ratio:
            with transaction.atomic():  # what a spend writes: inputs spent, outputs created
                Token.objects.filter(pk__in=picked.token_ids).update(
                    spent_by=tx_id, spent_at=timezone.now()
                )
                # The payment goes back to the same wallet too: the supply stays constant,
                # so every mode runs against the same amount of value.
                outputs = [
                    Token(tx_id=tx_id, index=0, wallet=WALLET, currency=CURRENCY, quantity=quantity)
                ]
                if picked.change:
                    outputs.append(
                        Token(
                            tx_id=tx_id,
                            index=1,
                            wallet=WALLET,
                            currency=CURRENCY,
                            quantity=picked.change,
                        )
                    )
                Token.objects.bulk_create(outputs)
            selector.forget(picked.token_ids, picked.key)
        else:
            selector.release(picked)
    report = {
        "selections": rows,
        "cpu": time.process_time() - cpu,
        "notifications": dict(listener.stats.received) if listener else {},
    }
    Path(args.report).write_text(json.dumps(report))


# -- the measurement ---------------------------------------------------------------------------


if __name__ == "__main__":
    worker(parse_args(sys.argv[1:]))
