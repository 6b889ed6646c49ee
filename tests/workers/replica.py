"""One replica process for the contention tests: select, hold, then spend or release.

Run as ``python -m tests.workers.replica --out FILE ...`` with ``DATABASE_URL`` set. Every
outcome is written as a JSON line; held intervals use CLOCK_MONOTONIC, which is one clock for
every process on the machine, so the test can check that no token was held twice at once.

With ``--currencies`` (two or more) a replica selects each time in one of them, or, drawn with
``--legs-ratio``, in all of them at once (one multi-currency selection, all legs or none), and
spends such a selection per currency. Drawn with ``--oversized-ratio``, a multi-currency request
asks its last leg (in currency order) more than any wallet holds, so the legs before it are
locked and must all be let go.
"""

from __future__ import annotations

import argparse
import dataclasses
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
    parser.add_argument(
        "--currencies", nargs="+", default=None, help="select in these (default: --currency)"
    )
    parser.add_argument(
        "--legs-ratio", type=float, default=0.0, help="share of selections taking every currency"
    )
    parser.add_argument(
        "--oversized-ratio",
        type=float,
        default=0.0,
        help="share of multi-currency requests whose last leg asks --oversized-quantity",
    )
    parser.add_argument("--oversized-quantity", type=int, default=10**9)
    parser.add_argument("--selections", type=int, default=20)
    parser.add_argument("--min-quantity", type=int, default=1)
    parser.add_argument("--max-quantity", type=int, default=30)
    parser.add_argument("--hold", type=float, default=0.002, help="seconds to hold a selection")
    parser.add_argument("--spend-ratio", type=float, default=0.5)
    parser.add_argument(
        "--overstay-ratio",
        type=float,
        default=0.0,
        help="share of selections held --overstay seconds (past a short lease) before the spend",
    )
    parser.add_argument("--overstay", type=float, default=0.0)
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
        "--denomination",
        type=int,
        default=0,
        help="pay and change back in tokens of at most this much (0: one token each)",
    )
    parser.add_argument(
        "--strategies",
        nargs="+",
        default=["random"],
        help="selection strategies, one drawn per selection (see TERMS for their terms)",
    )
    parser.add_argument(
        "--backoff-attempts",
        type=int,
        default=None,
        help="backoff rounds of this replica's selector (default: the shipped constant)",
    )
    parser.add_argument("--backoff-max", type=float, default=None, help="with --backoff-attempts")
    return parser.parse_args(argv)


def tune(args: argparse.Namespace) -> None:
    """Give this replica's selector the backoff the test asks for, else the shipped tuning."""
    if args.backoff_attempts is None:
        return
    from locks import replica
    from sherdlock import BackoffPolicy, SelectorConfig
    from sherdlock.config import BACKOFF_MAX, BACKOFF_MIN

    backoff = BackoffPolicy(
        attempts=args.backoff_attempts,
        min_delay=BACKOFF_MIN,
        max_delay=BACKOFF_MAX if args.backoff_max is None else args.backoff_max,
    )
    shipped = replica.selector_config

    def selector_config(listening: bool = False) -> SelectorConfig:
        return dataclasses.replace(shipped(listening), backoff=backoff)

    replica.selector_config = selector_config


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    tune(args)
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
    from locks.errors import LeaseLost
    from sherdlock import FundsLocked, InsufficientFunds, NoMatch, Strategy

    currencies = args.currencies or [args.currency]
    for n in range(args.selections):
        tx_id = f"{args.name}-{n}"
        wallet = rng.choice(args.wallets)
        quantity = rng.randint(args.min_quantity, args.max_quantity)
        name = rng.choice(args.strategies)
        strategy = Strategy(name, **TERMS.get(name, {}))  # type: ignore[arg-type]
        record: dict[str, object] = {"tx_id": tx_id, "wallet": wallet, "strategy": name}
        wanted = draw(args, rng, currencies, quantity, record)
        started = time.monotonic()
        try:
            if len(wanted) > 1:
                selection = select_legs_as_a_client(tx_id, wallet, wanted, rng, record, strategy)
            elif args.wait:
                selection, _ = services.select_tokens(
                    tx_id, wallet, *only(wanted), wait=args.wait, strategy=strategy
                )
            else:
                selection = select_as_a_client(
                    services, tx_id, wallet, *only(wanted), rng, record, strategy
                )
        except NoMatch as exc:
            record.update(outcome="no_match", detail=str(exc), leg=getattr(exc, "leg", None))
        except InsufficientFunds as exc:
            record.update(
                outcome="insufficient_funds",
                available=exc.available,
                leg=getattr(exc, "leg", None),
            )
        except FundsLocked as exc:
            record.update(
                outcome="funds_locked", available=exc.available, leg=getattr(exc, "leg", None)
            )
        else:
            acquired = time.monotonic()
            if rng.random() < args.overstay_ratio:
                record["overstayed"] = True
                time.sleep(args.overstay)
            else:
                time.sleep(args.hold * rng.random() * 2)
            record.update(
                outcome="selected",
                tokens=list(selection.token_ids),
                total=str(selection.total),
                totals=held(selection),
                acquired=acquired,
                waited=acquired - started,
            )
            if rng.random() < args.spend_ratio:
                record["released_at"] = time.monotonic()
                try:
                    spend(services, args, selection, wanted, record)
                except LeaseLost:
                    # Refused once the lease ran out, as it must be; a client then lets go.
                    services.release_selection(tx_id)
                    record["action"] = "lease_lost"
                else:
                    record["action"] = "spent"
            else:
                record["released_at"] = time.monotonic()
                services.release_selection(tx_id)
                record["action"] = "released"
        out.write(json.dumps(record) + "\n")


def draw(
    args: argparse.Namespace,
    rng: random.Random,
    currencies: list[str],
    quantity: int,
    record: dict[str, object],
) -> dict[str, int]:
    """Draw what to select, {currency: quantity}: one currency, or every one as legs."""
    if len(currencies) > 1 and rng.random() < args.legs_ratio:
        wanted = {c: rng.randint(args.min_quantity, args.max_quantity) for c in currencies}
        if rng.random() < args.oversized_ratio:
            wanted[max(currencies)] = args.oversized_quantity
            record["oversized"] = max(currencies)
        record["legs"] = wanted
        return wanted
    # One currency: no draw when there is only one, so such runs repeat their seed.
    currency = rng.choice(currencies) if len(currencies) > 1 else currencies[0]
    record.update(currency=currency, quantity=quantity)
    return {currency: quantity}


def only(wanted: dict[str, int]) -> tuple[str, int]:
    """The currency and quantity of a one-currency request."""
    ((currency, quantity),) = wanted.items()
    return currency, quantity


def spend(
    services,
    args: argparse.Namespace,
    selection,
    wanted: dict[str, int],
    record: dict[str, object],
) -> None:
    """Pay each currency's ``wanted`` quantity and return its change to the same wallet.

    Supply is conserved per currency, so any insufficient-funds outcome would be spurious. A
    selection with legs first tries outputs worth its whole value with one unit moved from one
    currency to another, which must be refused: value is conserved per currency.
    """
    from locks.errors import ValueNotConserved

    tx_id, wallet, totals = selection.tx_id, selection.wallet, held(selection)
    shifted = shift(totals)
    if shifted is not None:
        try:
            services.spend_selection(tx_id, outputs(tx_id, wallet, shifted))
        except ValueNotConserved:
            record["shift"] = "refused"
        else:
            record["shift"] = "accepted"
            return
    paid = outputs(tx_id, wallet, totals, wanted, args.payee, args.denomination)
    services.spend_selection(tx_id, paid)


def held(selection) -> dict[str, int]:
    """What a selection holds per currency: {currency: total}."""
    if selection.legs:
        return {leg["currency"]: int(leg["total"]) for leg in selection.legs}
    return {selection.currency: int(selection.total)}


def shift(totals: dict[str, int]) -> dict[str, int] | None:
    """``totals`` with one unit moved from the largest to another currency.

    None with one currency, or when every total is 1.
    """
    source = max(totals, key=lambda c: totals[c])
    if len(totals) < 2 or totals[source] < 2:
        return None
    target = min(c for c in totals if c != source)
    return {**totals, source: totals[source] - 1, target: totals[target] + 1}


def outputs(
    tx_id: str,
    wallet: str,
    totals: dict[str, int],
    asked: dict[str, int] | None = None,
    payee: str | None = None,
    denomination: int = 0,
) -> list:
    """Per currency, pay what was ``asked`` (default: the total) and give the change back.

    With a ``denomination`` each is paid in tokens of at most that much, so that a wallet
    paying itself keeps small tokens however long it runs (else spends merge them).
    """
    from tokens.services import TokenSpec

    specs: list[TokenSpec] = []
    for currency in sorted(totals):
        paid = totals[currency] if asked is None else asked[currency]
        parts = [(payee or wallet, paid), (wallet, totals[currency] - paid)]
        for owner, value in parts:
            for piece in pieces(value, denomination):
                specs.append(TokenSpec(tx_id, len(specs), owner, currency, piece))
    return specs


def pieces(value: int, most: int) -> list[int]:
    """``value`` (maybe 0: none) as tokens of at most ``most`` (one token if ``most`` is 0)."""
    if not most:
        return [value] if value else []
    return [most] * (value // most) + ([value % most] if value % most else [])


def select_as_a_client(
    services, tx_id, wallet, currency, quantity, rng, record, strategy=None, attempts: int = 60
):
    """Select as an API client does: retry "funds locked" after its hint, with jitter."""

    def once():
        return services.select_tokens(tx_id, wallet, currency, quantity, strategy=strategy)

    return retried(once, rng, record, attempts)


def select_legs_as_a_client(tx_id, wallet, wanted, rng, record, strategy):
    """Select every currency of ``wanted`` at once, retrying as ``select_as_a_client`` does."""
    from locks.legs import select_tokens_legs

    def once():
        return select_tokens_legs(tx_id, wallet, list(wanted.items()), strategy=strategy)

    return retried(once, rng, record)


def retried(once, rng, record, attempts: int = 60):
    """Call ``once`` until it answers other than "funds locked" (the last time, raise it)."""
    from sherdlock import FundsLocked

    for attempt in range(attempts):
        try:
            selection, _ = once()
            return selection
        except FundsLocked as exc:
            record["retries"] = attempt + 1
            if attempt == attempts - 1:
                raise
            time.sleep(min(exc.retry_after, 0.05) * rng.uniform(0.5, 1.5))
    raise AssertionError("unreachable")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
