"""One replica process for the contention tests: select, hold, then spend or release.

Run as ``python -m tests.workers.replica --out FILE ...`` with ``DATABASE_URL`` set. Every
outcome is written as a JSON line; held intervals use CLOCK_MONOTONIC, which is one clock for
every process on the machine, so the test can check that no token was held twice at once.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--go", required=True, help="start when this file exists")
    parser.add_argument("--name", required=True)
    parser.add_argument("--wallets", nargs="+", required=True)
    parser.add_argument("--currency", default="USD")
    parser.add_argument("--selections", type=int, default=20)
    parser.add_argument("--min-quantity", type=int, default=1)
    parser.add_argument("--max-quantity", type=int, default=30)
    parser.add_argument("--hold", type=float, default=0.002, help="seconds to hold a selection")
    parser.add_argument("--spend-ratio", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--wait",
        type=float,
        default=0.0,
        help="seconds a selection may wait its turn for held funds",
    )
    parser.add_argument(
        "--payee", default=None, help="pay the quantity to this wallet (change back to the payer)"
    )
    parser.add_argument(
        "--strategies",
        nargs="+",
        default=["random"],
        help="selection strategies, one drawn per selection (see TERMS for their terms)",
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    rng = random.Random(args.seed)
    go = Path(args.go)
    while not go.exists():
        time.sleep(0.01)
    with Path(args.out).open("a", buffering=1) as out:
        run(args, rng, out)
    return 0


# The terms of the strategies that take some: enough change for exact to always find a set
# among tokens of 5, enough inputs for consolidate to cover the largest request.
TERMS: dict[str, dict[str, object]] = {"exact": {"max_change": 4}, "consolidate": {"max_tokens": 6}}


def run(args: argparse.Namespace, rng: random.Random, out) -> None:
    """Make ``args.selections`` selections, writing one JSON line each."""
    from locks import services
    from sherdlock import FundsLocked, InsufficientFunds, NoMatch, Strategy
    from tokens.services import TokenSpec

    for n in range(args.selections):
        tx_id = f"{args.name}-{n}"
        wallet = rng.choice(args.wallets)
        quantity = rng.randint(args.min_quantity, args.max_quantity)
        name = rng.choice(args.strategies)
        strategy = Strategy(name, **TERMS.get(name, {}))  # type: ignore[arg-type]
        record: dict[str, object] = {
            "tx_id": tx_id,
            "wallet": wallet,
            "quantity": quantity,
            "strategy": name,
        }
        started = time.monotonic()
        try:
            if args.wait:
                selection, _ = services.select_tokens(
                    tx_id, wallet, args.currency, quantity, wait=args.wait, strategy=strategy
                )
            else:
                selection = select_as_a_client(
                    services, tx_id, wallet, args.currency, quantity, rng, record, strategy
                )
        except NoMatch as exc:
            record.update(outcome="no_match", detail=str(exc))
        except InsufficientFunds as exc:
            record.update(outcome="insufficient_funds", available=exc.available)
        except FundsLocked as exc:
            record.update(outcome="funds_locked", available=exc.available)
        else:
            acquired = time.monotonic()
            time.sleep(args.hold * rng.random() * 2)
            record.update(
                outcome="selected",
                tokens=list(selection.token_ids),
                total=str(selection.total),
                acquired=acquired,
                waited=acquired - started,
            )
            if rng.random() < args.spend_ratio:
                # Pay `quantity` and return the change to the same wallet: supply is conserved,
                # so any insufficient-funds outcome would be spurious.
                change = int(selection.total) - quantity
                outputs = [TokenSpec(tx_id, 0, args.payee or wallet, args.currency, quantity)]
                if change:
                    outputs.append(TokenSpec(tx_id, 1, wallet, args.currency, change))
                record["released_at"] = time.monotonic()
                services.spend_selection(tx_id, outputs)
                record["action"] = "spent"
            else:
                record["released_at"] = time.monotonic()
                services.release_selection(tx_id)
                record["action"] = "released"
        out.write(json.dumps(record) + "\n")


def select_as_a_client(
    services, tx_id, wallet, currency, quantity, rng, record, strategy=None, attempts: int = 60
):
    """Select as an API client does: retry "funds locked" after its hint, with jitter."""
    from sherdlock import FundsLocked

    for attempt in range(attempts):
        try:
            selection, _ = services.select_tokens(
                tx_id, wallet, currency, quantity, strategy=strategy
            )
            return selection
        except FundsLocked as exc:
            record["retries"] = attempt + 1
            if attempt == attempts - 1:
                raise
            time.sleep(min(exc.retry_after, 0.05) * rng.uniform(0.5, 1.5))
    raise AssertionError("unreachable")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
