"""Compare the per-currency supply summary with a recount of the tokens, or rebuild it."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tokens import supply


class Command(BaseCommand):
    help = (
        "Recount the unspent supply per currency and compare it with the summary the "
        "dashboard reads (exit 1 on a difference); --rebuild replaces the summary."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--rebuild",
            action="store_true",
            help="replace the summary by the recount (after loading or deleting tokens by hand)",
        )

    def handle(self, *args, **options) -> None:
        if options["rebuild"]:
            rebuilt = supply.rebuild()
            for currency, total in sorted(rebuilt.items()):
                self.stdout.write(f"{currency}\t{total}")
            self.stdout.write(self.style.SUCCESS(f"rebuilt {len(rebuilt)} currenc(ies)"))
            return
        stored = supply.summary()
        for currency, total in sorted(stored.items()):
            self.stdout.write(f"{currency}\t{total}")
        drift = supply.drift()
        if drift:
            for currency, (kept, real) in drift.items():
                self.stderr.write(f"{currency}: summary {kept}, tokens {real}")
            raise CommandError(
                "the supply summary differs from the tokens; run `manage.py supply --rebuild`"
            )
        self.stdout.write(self.style.SUCCESS("the summary matches the tokens"))
