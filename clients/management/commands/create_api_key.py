"""Create an API key for some wallets and rights, and print it once."""

from __future__ import annotations

from datetime import timedelta

from django.core.management.base import CommandError, CommandParser
from django.utils import timezone

from clients.models import ApiKey
from common.commands import DatabaseCommand
from common.rules import NAMESPACE_MAX_LENGTH, is_identifier


class Command(DatabaseCommand):
    help = (
        "Create an API key and print it (only its hash is stored: this is the one chance "
        "to copy it). Rights: --issue, --select; reading is on unless --no-read."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="a label for the key (50 characters max)")
        parser.add_argument(
            "--wallet",
            action="append",
            default=[],
            dest="wallets",
            help="a wallet the key may use; repeat for several",
        )
        parser.add_argument(
            "--all-wallets", action="store_true", help="the key may use every wallet"
        )
        parser.add_argument("--issue", action="store_true", help="may issue tokens")
        parser.add_argument(
            "--select", action="store_true", help="may select, spend, release and extend"
        )
        parser.add_argument("--no-read", action="store_true", help="may not read")
        parser.add_argument(
            "--namespace",
            default="",
            help="the namespace of transaction ids to share with the client's other keys: to "
            "rotate a key, give the old key's, and the new key keeps its open selections "
            "(default: a namespace of the new key's own)",
        )
        parser.add_argument(
            "--expires-in-days",
            type=float,
            default=None,
            help="expire the key after this many days",
        )

    def handle(self, *args, **options) -> None:
        name, wallets = options["name"], options["wallets"]
        if not 0 < len(name) <= 50:
            raise CommandError("the name must have 1 to 50 characters")
        if not wallets and not options["all_wallets"]:
            raise CommandError("give at least one --wallet, or --all-wallets")
        if bad := [w for w in wallets if not is_identifier(w)]:
            raise CommandError(f"invalid wallet name(s): {bad!r}")
        namespace = options["namespace"]
        if namespace and not is_identifier(namespace, NAMESPACE_MAX_LENGTH):
            raise CommandError(f"invalid namespace: {namespace!r}")
        expiry = None
        if options["expires_in_days"] is not None:
            expiry = timezone.now() + timedelta(days=options["expires_in_days"])
        key, raw = ApiKey.objects.create_key(
            name=name,
            wallets=sorted(set(wallets)),
            all_wallets=options["all_wallets"],
            can_issue=options["issue"],
            can_select=options["select"],
            can_read=not options["no_read"],
            expiry_date=expiry,
            namespace=namespace,
        )
        self.stderr.write(f"Created API key {key.prefix} ({name}); it is shown only once:")
        if namespace and isinstance(key, ApiKey):  # the manager's type names the base class
            # A mistyped namespace would share nothing: say with whom it is shared.
            self.stderr.write(f"It shares namespace {namespace!r} with {key.namespace_peers()}.")
        self.stdout.write(raw)
