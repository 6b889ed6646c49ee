from django.contrib import admin

from tokens.models import Token


@admin.register(Token)
class TokenAdmin(admin.ModelAdmin):
    list_display = ["__str__", "wallet", "currency", "quantity", "created_at", "spent_by"]
    list_filter = ["currency"]
    search_fields = ["=tx_id", "=wallet"]
    show_full_result_count = False
