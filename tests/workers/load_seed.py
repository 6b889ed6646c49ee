"""Tokens and an API key for the load clients, on the database of ``DATABASE_URL``.

``python -m tests.workers.load_seed --tokens N --quantity Q WALLET...`` creates N tokens of Q
USD in each wallet (one bulk insert) and an API key for those wallets that may select and
issue, and prints the key. It runs in its own process because the test's Django connection
belongs to the test database, not to the throwaway one the fault tests use.
"""

from __future__ import annotations

import argparse
import sys
from decimal import Decimal


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("wallets", nargs="+")
    parser.add_argument("--tokens", type=int, required=True, help="tokens per wallet")
    parser.add_argument("--quantity", type=int, default=10)
    args = parser.parse_args(argv)
    import django

    django.setup()
    from clients.models import ApiKey
    from tokens.models import Token

    Token.objects.bulk_create(
        Token(
            tx_id=f"mint-{wallet}",
            index=i,
            wallet=wallet,
            currency="USD",
            quantity=Decimal(args.quantity),
        )
        for wallet in args.wallets
        for i in range(args.tokens)
    )
    _, raw = ApiKey.objects.create_key(
        name="load", wallets=args.wallets, can_select=True, can_issue=True
    )
    print(raw)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
