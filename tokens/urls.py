"""Routes of the token endpoints, mounted under /api/v1/."""

from django.urls import path

from tokens import views

urlpatterns = [
    path("tokens/", views.TokenListCreate.as_view(), name="token-list"),
    path("wallets/<str:wallet>/balances/", views.WalletBalances.as_view(), name="wallet-balances"),
]
