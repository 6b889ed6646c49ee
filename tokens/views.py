"""Token endpoints: issue, list, wallet balances."""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from clients.permissions import ISSUE, check_wallets, request_namespace, scope_queryset
from common.errors import error_responses
from common.filters import query_param
from common.pagination import IdCursorPagination
from common.rules import CURRENCY_MAX_LENGTH, ID_MAX_LENGTH, identifier_schema, is_identifier
from tokens.filters import TokenFilter
from tokens.models import Token
from tokens.serializers import (
    IssueResultSerializer,
    IssueSerializer,
    TokenSerializer,
    WalletBalancesSerializer,
)
from tokens.services import balances, issue_tokens


class TokenListCreate(generics.ListAPIView):
    """List tokens (GET) or issue new ones (POST)."""

    rights = {"POST": ISSUE}
    read_permissions = ("tokens.view_token",)
    serializer_class = TokenSerializer
    filterset_class = TokenFilter
    pagination_class = IdCursorPagination

    def get_queryset(self):
        tokens = Token.objects.with_spender_seen_by(request_namespace(self.request))
        return scope_queryset(self.request, tokens)

    @extend_schema(
        summary="List tokens",
        tags=["tokens"],
        description="Without a wallet filter, only the wallets of the API key are listed.",
        responses={200: TokenSerializer(many=True), **error_responses(400, 401, 403, 404)},
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        summary="Issue tokens",
        tags=["tokens"],
        description=(
            "Create 1..1000 tokens in one transaction. Re-sending an identical token is a "
            "no-op; 201 when anything was new, 200 otherwise. A known identity with different "
            "content is a 409 token_conflict and nothing is written."
        ),
        request=IssueSerializer,
        responses={
            201: IssueResultSerializer,
            200: IssueResultSerializer,
            **error_responses(400, 401, 403, 409, 413, 415, conflicts="token_conflict"),
        },
    )
    def post(self, request):
        serializer = IssueSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        specs = serializer.specs()
        check_wallets(request, {spec.wallet for spec in specs})
        namespace = request_namespace(request) or ""
        tokens, created = issue_tokens(specs, namespace=namespace)
        spenders = {}
        if spent := [t.pk for t in tokens if t.spent_by is not None]:  # re-sent, spent since
            seen = Token.objects.with_spender_seen_by(namespace).filter(pk__in=spent)
            spenders = dict(seen.values_list("pk", "seen_spent_by"))
        for token in tokens:
            token.seen_spent_by = spenders.get(token.pk)
        body = IssueResultSerializer({"created": created, "tokens": tokens}).data
        return Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class WalletBalances(APIView):
    """Report a wallet's unspent, locked and available quantities per currency."""

    read_permissions = ("tokens.view_token", "locks.view_tokenlock")

    @extend_schema(
        summary="Wallet balances",
        tags=["tokens"],
        parameters=[
            OpenApiParameter(
                "wallet", identifier_schema(ID_MAX_LENGTH, path=True), OpenApiParameter.PATH
            ),
            OpenApiParameter(
                "currency",
                identifier_schema(CURRENCY_MAX_LENGTH),
                description="Only this currency.",
            ),
        ],
        responses={200: WalletBalancesSerializer, **error_responses(400, 401, 403, 404)},
    )
    def get(self, request, wallet: str):
        if not is_identifier(wallet, path=True):
            raise Http404
        check_wallets(request, [wallet])
        currency = query_param(request, "currency")
        if currency is not None and not is_identifier(currency, CURRENCY_MAX_LENGTH):
            raise ValidationError({"currency": ["Not a valid currency."]})
        rows = balances(wallet, currency)
        return Response(WalletBalancesSerializer({"wallet": wallet, "balances": rows}).data)
