"""Install or remove the triggers that publish token and lock changes to replica caches."""

from django.core.management.base import BaseCommand

from locks import notifications


class Command(BaseCommand):
    help = (
        "Install (on) or remove (off) the change-notification triggers that replica cache "
        "listeners need; without an argument, report whether they are installed."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("state", nargs="?", choices=["on", "off"])

    def handle(self, *args, state: str | None = None, **options) -> None:
        if state == "on":
            notifications.install()
        elif state == "off":
            notifications.uninstall()
        self.stdout.write("on" if notifications.installed() else "off")
