"""System checks of the clients' settings (``manage.py check``, and before ``migrate``).

The environment's rate limits are refused as the settings load (``config.settings``); these
checks also cover ``SHERDLOCK_RATE_LIMITS`` set by hand in a settings module, which would
otherwise fail at the first selection.
"""

from __future__ import annotations

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from clients.throttling import configured_rate  # as every selection reads them

# The limits the service draws from (``clients.throttling.selection_buckets``).
RATE_SCOPES = ("selections_per_key", "selections_per_wallet")


@checks.register(checks.Tags.security)
def rate_limits(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """Refuse a rate limit that does not parse; warn of a scope nothing draws from."""
    limits = getattr(settings, "SHERDLOCK_RATE_LIMITS", {})
    if not isinstance(limits, dict):
        return [
            checks.Error(
                f"SHERDLOCK_RATE_LIMITS must be a dict of scope to rate, not {limits!r}",
                id="clients.E001",
            )
        ]
    out: list[checks.CheckMessage] = []
    for scope in limits:
        try:
            configured_rate(limits, scope)
        except ImproperlyConfigured as exc:
            out.append(
                checks.Error(
                    str(exc),
                    hint="Write N/P with an optional unit (s, m, h, d), or 'off'.",
                    id="clients.E002",
                )
            )
        if scope not in RATE_SCOPES:
            out.append(
                checks.Warning(
                    f"SHERDLOCK_RATE_LIMITS[{scope!r}] limits nothing",
                    hint=f"The scopes are {', '.join(RATE_SCOPES)}.",
                    id="clients.W001",
                )
            )
    return out
