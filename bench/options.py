"""The harness's command line: what ``python -m bench`` measures, and how big."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from bench import database, strategies
from bench.housekeeping import parse_size

RESULTS = Path(__file__).resolve().parent / "results"
WORKLOADS = ("spread", "hot-wallet", "hot-tokens")


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def _names(choices: tuple[str, ...]):
    def parse(text: str) -> list[str]:
        names = [part.strip() for part in text.split(",") if part.strip()]
        if unknown := sorted(set(names) - set(choices)):
            raise argparse.ArgumentTypeError(f"unknown: {', '.join(unknown)}")
        return names

    return parse


def _size(text: str):
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--workloads", type=_names(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--strategies", type=_names(strategies.ALL), default=list(strategies.ALL))
    parser.add_argument(
        "--replicas", type=_ints, default=[1, 8, 20], help="replica counts, comma-separated"
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=8.0,
        help="seconds per point (default 8, the length the selection targets were set at)",
    )
    parser.add_argument(
        "--quiet-spell",
        type=int,
        default=0,
        metavar="ROWS",
        help="before each selection point, lock ROWS tokens, release them, vacuum the lock "
        "table and housekeep, as a quiet spell after a burst leaves it (default 0: start from "
        "an empty one)",
    )
    parser.add_argument(
        "--reference-rounds",
        type=int,
        default=3,
        metavar="N",
        help="measure ours and the reference N times at each point where both run, "
        "alternating which goes first, and judge the median ratio (default 3; 1: once, in "
        "the pass over every strategy; see bench.reference_rounds)",
    )
    parser.add_argument("--spread-wallets", type=int, default=1000)
    parser.add_argument("--spread-tokens", type=int, default=100, help="tokens per wallet")
    parser.add_argument("--hot-wallet-tokens", type=int, default=1000)
    parser.add_argument("--hot-tokens-big", type=int, default=10)
    parser.add_argument("--hot-tokens-big-quantity", type=int, default=1000)
    parser.add_argument("--hot-tokens-small", type=int, default=990)
    parser.add_argument(
        "--spend-ratio",
        type=float,
        default=0.5,
        help="share of selections spent (the rest are released)",
    )
    parser.add_argument(
        "--hold",
        type=float,
        default=0.0,
        help="mean seconds a selection is held before spend or release",
    )
    parser.add_argument(
        "--http-replicas",
        type=_ints,
        default=[4, 8],
        help="load processes of the HTTP points; empty skips them",
    )
    parser.add_argument(
        "--http-workers",
        type=int,
        default=None,
        help="web server workers of the HTTP points (WEB_CONCURRENCY); default: make run's",
    )
    parser.add_argument(
        "--http-workloads", type=_names(WORKLOADS), default=["hot-wallet", "spread"]
    )
    parser.add_argument(
        "--housekeeping",
        type=_size,
        default=(1000, 2000, 1_000_000),
        metavar="WALLETSxTOKENS:EXPIRED",
        help="sizes of the housekeeping points (default 1000x2000:1000000); 'off' skips them",
    )
    parser.add_argument("--housekeeping-replicas", type=int, default=8)
    parser.add_argument(
        "--housekeeping-duration",
        type=float,
        default=8.0,
        help="seconds per housekeeping point (default 8; the clean-up they sample takes ~50)",
    )
    parser.add_argument(
        "--client-cycles",
        type=int,
        default=2000,
        help="cycles of the API client's CPU cost against a bare http.client loop "
        "(bench.client_cpu); 0 skips it",
    )
    parser.add_argument(
        "--chain-payments",
        type=int,
        default=100,
        help="payments of the chain (one token of this many); 0 skips it",
    )
    parser.add_argument(
        "--chain-processes",
        type=int,
        default=4,
        help="processes the chain's payments (threads) are spread over",
    )
    parser.add_argument(
        "--chain-timeout",
        type=float,
        default=60.0,
        help="seconds after which an unfinished payment counts as an error",
    )
    parser.add_argument(
        "--chain-wait",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="a selection may wait this long for held funds, in the key's "
        "queue (Prefer: wait=N over HTTP); 0 answers funds locked at "
        "once and the payment retries after the advice it was given",
    )
    parser.add_argument(
        "--pgbouncer-replicas",
        type=int,
        default=50,
        help="replica processes of the PgBouncer points, pooled and direct; 0 skips them",
    )
    parser.add_argument(
        "--pgbouncer-pool",
        type=int,
        default=10,
        help="server sessions PgBouncer pools the replicas' transactions onto",
    )
    parser.add_argument(
        "--pgbouncer-workloads", type=_names(WORKLOADS), default=["spread", "hot-wallet"]
    )
    parser.add_argument(
        "--selection-strategies",
        type=_names(strategies.SELECTION_STRATEGIES),
        default=list(strategies.SELECTION_STRATEGIES),
        help="selection strategies measured against random on the spread workload "
        "(bench.selection_strategies); empty skips them",
    )
    parser.add_argument("--strategy-replicas", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--database",
        default=database.DEFAULT_NAME,
        help="database to create and use on the server (emptied!)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="hash partitions by wallet (SHERDLOCK_PARTITIONS) of the benchmark database; "
        "unless --database is given, N > 1 uses a database of its own, <database>_pN",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--check",
        type=Path,
        metavar="BASELINE",
        help="compare the fresh report with BASELINE; exit 1 on a regression",
    )
    parser.add_argument("--tolerance", type=float, default=0.25)
    parser.add_argument(
        "--confirm",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with --check, measure every point that dropped beyond the tolerance again; "
        "a drop counts only if it shows twice (default: on)",
    )
    parser.add_argument(
        "--write-baseline", action="store_true", help="also save the report as <out>/baseline.json"
    )
    args = parser.parse_args(argv)
    if args.partitions is not None:
        if args.partitions < 1:
            parser.error("--partitions must be at least 1")
        # Read by the migrations (fixed when a database is migrated) and by housekeeping.
        os.environ["SHERDLOCK_PARTITIONS"] = str(args.partitions)
        if args.partitions > 1 and args.database == database.DEFAULT_NAME:
            args.database = f"{database.DEFAULT_NAME}_p{args.partitions}"
    if args.quiet_spell < 0:
        parser.error("--quiet-spell must not be negative")
    if args.reference_rounds < 1:
        parser.error("--reference-rounds must be at least 1")
    if not args.replicas or min(args.replicas) < 1 or args.duration <= 0:
        parser.error("need positive replica counts and duration")
    if args.housekeeping_duration <= 0:
        parser.error("--housekeeping-duration must be positive")
    if (
        min(args.http_replicas, default=1) < 1
        or min(args.housekeeping_replicas, args.strategy_replicas) < 1
    ):
        parser.error("need positive replica counts")
    if args.pgbouncer_replicas < 0 or args.pgbouncer_pool < 1:
        parser.error("need a non-negative PgBouncer replica count and a positive pool")
    if args.chain_payments < 0 or args.chain_processes < 1 or args.chain_timeout <= 0:
        parser.error("need a non-negative chain size, positive processes and timeout")
    return args
