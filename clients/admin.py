"""Operators create and revoke API keys here; a new key is shown once, on creation."""

from django.contrib import admin
from rest_framework_api_key.admin import APIKeyModelAdmin
from rest_framework_api_key.models import APIKey

from clients.models import ApiKey

# The package registers its own key model, which Sherdlock does not use: hide it so operators
# cannot create keys that authenticate nowhere.
if admin.site.is_registered(APIKey):
    admin.site.unregister(APIKey)


@admin.register(ApiKey)
class ApiKeyAdmin(APIKeyModelAdmin):
    # APIKeyModelAdmin leaves these unannotated, so the type checker takes its tuples for their
    # exact length; Django's admin takes any sequence.
    list_display = [  # type: ignore[assignment]
        *APIKeyModelAdmin.list_display,
        "wallet_scope",
        "can_issue",
        "can_select",
        "can_read",
    ]
    list_filter = ["created", "revoked", "all_wallets", "can_issue", "can_select", "can_read"]  # type: ignore[assignment]
    search_fields = ["name", "prefix", "wallets"]  # type: ignore[assignment]
    fieldsets = [
        (None, {"fields": ["name", "prefix", "expiry_date", "revoked"]}),
        ("Scope", {"fields": ["all_wallets", "wallets"]}),
        ("Rights", {"fields": ["can_issue", "can_select", "can_read"]}),
    ]

    @admin.display(description="wallets")
    def wallet_scope(self, key: ApiKey) -> str:
        return "all" if key.all_wallets else ", ".join(key.wallets) or "none"
