from django.apps import AppConfig


class ClientsConfig(AppConfig):
    name = "clients"
    verbose_name = "API clients"

    def ready(self) -> None:
        from clients import checks  # noqa: F401  (registers the system checks)
