from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _sync_notifications(sender, using, plan=None, **kwargs) -> None:
    """After migrate, install the cache-notification triggers iff replicas listen."""
    from locks import notifications

    notifications.sync(using)


class LocksConfig(AppConfig):
    name = "locks"
    verbose_name = "Locks and selections"

    def ready(self) -> None:
        post_migrate.connect(_sync_notifications, sender=self)
