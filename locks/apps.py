from django.apps import AppConfig


class LocksConfig(AppConfig):
    name = "locks"
    verbose_name = "Locks and selections"
