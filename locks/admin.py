from django.contrib import admin

from locks.models import TokenLock


@admin.register(TokenLock)
class TokenLockAdmin(admin.ModelAdmin):
    list_display = ["token", "spender_tx_id", "fence", "created_at", "expires_at"]
    search_fields = ["=spender_tx_id"]
    list_select_related = ["token"]
    show_full_result_count = False
