"""Operators create and revoke API keys here; a new key is shown once, on creation."""

from django import forms
from django.contrib import admin, messages
from rest_framework_api_key.admin import APIKeyModelAdmin
from rest_framework_api_key.models import APIKey

from clients.models import ApiKey
from common.rules import NAMESPACE_MAX_LENGTH, is_identifier

# The package registers its own key model, which Sherdlock does not use: hide it so operators
# cannot create keys that authenticate nowhere.
if admin.site.is_registered(APIKey):
    admin.site.unregister(APIKey)


class ApiKeyForm(forms.ModelForm):
    class Meta:
        model = ApiKey
        fields = [
            "name",
            "expiry_date",
            "revoked",
            "all_wallets",
            "wallets",
            "namespace",
            "can_issue",
            "can_select",
            "can_read",
        ]

    def clean_namespace(self) -> str:
        namespace = self.cleaned_data.get("namespace", "")
        if namespace and not is_identifier(namespace, NAMESPACE_MAX_LENGTH):
            raise forms.ValidationError("Use printable characters, not only spaces.")
        return namespace


@admin.register(ApiKey)
class ApiKeyAdmin(APIKeyModelAdmin):
    form = ApiKeyForm
    # APIKeyModelAdmin leaves these unannotated, so the type checker takes its tuples for their
    # exact length; Django's admin takes any sequence.
    list_display = [  # type: ignore[assignment]
        *APIKeyModelAdmin.list_display,
        "wallet_scope",
        "namespace",
        "can_issue",
        "can_select",
        "can_read",
    ]
    list_filter = ["created", "revoked", "all_wallets", "can_issue", "can_select", "can_read"]  # type: ignore[assignment]
    search_fields = ["name", "prefix", "wallets", "namespace"]  # type: ignore[assignment]
    fieldsets = [
        (None, {"fields": ["name", "prefix", "expiry_date", "revoked"]}),
        ("Scope", {"fields": ["all_wallets", "wallets", "namespace"]}),
        ("Rights", {"fields": ["can_issue", "can_select", "can_read"]}),
    ]

    def get_readonly_fields(self, request, obj=None):
        fields = tuple(super().get_readonly_fields(request, obj))
        # A key's namespace is fixed once it exists: changing it would strand its open
        # selections, or hand it another client's. A rotation is a new key in the namespace.
        return fields if obj is None else (*fields, "namespace")

    def save_model(self, request, obj, form=None, change=False) -> None:
        shared = not change and bool(obj.namespace)
        super().save_model(request, obj, form, change)
        if shared:
            peers = obj.namespace_peers()
            messages.info(request, f"The key shares namespace {obj.namespace!r} with {peers}.")

    @admin.display(description="wallets")
    def wallet_scope(self, key: ApiKey) -> str:
        return "all" if key.all_wallets else ", ".join(key.wallets) or "none"
