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
    list_display = [
        *APIKeyModelAdmin.list_display,
        "wallet_scope",
        "can_issue",
        "can_select",
        "can_read",
    ]
    list_filter = ["created", "revoked", "all_wallets", "can_issue", "can_select", "can_read"]
    search_fields = ["name", "prefix", "wallets"]
    fieldsets = [
        (None, {"fields": ["name", "prefix", "expiry_date", "revoked"]}),
        ("Scope", {"fields": ["all_wallets", "wallets"]}),
        ("Rights", {"fields": ["can_issue", "can_select", "can_read"]}),
    ]

    @admin.display(description="wallets")
    def wallet_scope(self, key: ApiKey) -> str:
        return "all" if key.all_wallets else ", ".join(key.wallets) or "none"
