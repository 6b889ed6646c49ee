"""Views outside the apps: the API root, health probes and JSON error pages for /api/."""

from __future__ import annotations

import sys

from django.db import Error as DatabaseError
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.views import defaults
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions, permissions, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from common.commands import unapplied_migrations
from common.errors import error_body, error_responses
from config import sql
from config.exceptions import (
    ERRORS,
    SERVER_ERROR,
    ServiceUnavailable,
    error_response,
    unavailable_response,
)
from config.outage import is_connection_loss, is_overload

STATUS = inline_serializer("Status", {"status": serializers.CharField()})


class Probe(APIView):
    """A public probe: no authentication, no permissions, no throttling."""

    authentication_classes: list = []
    permission_classes = [permissions.AllowAny]
    throttle_classes: list = []


class Healthz(Probe):
    """Report that the process serves requests; touches nothing else."""

    @extend_schema(summary="Liveness", tags=["health"], responses={200: STATUS})
    def get(self, request):
        return Response({"status": "ok"})


# Whether this process has seen every migration of its code applied. Once it has, the probe
# asks the database only whether it answers: reading the migration graph and the table of
# applied migrations costs far more than the probe's one query, and a deployed database does
# not lose migrations while the code that needs them runs.
_migrated: list[bool] = [False]


class Readyz(Probe):
    """Report whether the database answers and has every migration of this code applied."""

    @extend_schema(
        summary="Readiness", tags=["health"], responses={200: STATUS, **error_responses(503)}
    )
    def get(self, request):
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql.READY)
                cursor.fetchone()
            pending = [] if _migrated[0] else unapplied_migrations()
        except DatabaseError as exc:
            return unavailable_response(request, exc)
        if pending:
            # Not ready until `sherdlock migrate` has run: a deploy's new processes wait for it.
            detail = (
                f"The database is not migrated: {len(pending)} migration(s) pending "
                f"(e.g. {pending[0]}); run `sherdlock migrate`."
            )
            return error_response(ServiceUnavailable(detail), ERRORS[ServiceUnavailable])
        _migrated[0] = True
        return Response({"status": "ok"})


class ApiRoot(Probe):
    """List the endpoints of the API."""

    @extend_schema(
        summary="API root",
        tags=["health"],
        responses={
            200: inline_serializer(
                "ApiRoot", {"endpoints": serializers.DictField(child=serializers.CharField())}
            )
        },
    )
    def get(self, request):
        def url(name: str, *args: str) -> str:
            return request.build_absolute_uri(reverse(name, args=args))

        endpoints = {
            "tokens": url("token-list"),
            "wallet_balances": url("wallet-balances", "WALLET").replace("WALLET", "{wallet}"),
            "selections": url("selection-list"),
            "selection": url("selection-detail", "TX").replace("TX", "{tx_id}"),
            "spend": url("selection-spend", "TX").replace("TX", "{tx_id}"),
            "release": url("selection-release", "TX").replace("TX", "{tx_id}"),
            "extend": url("selection-extend", "TX").replace("TX", "{tx_id}"),
            "locks": url("lock-list"),
            "schema": url("schema"),
            "docs": url("docs"),
            "healthz": url("healthz"),
            "readyz": url("readyz"),
        }
        return Response({"endpoints": endpoints})


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Answer unknown /api/ paths in the API's error shape; others get Django's page."""
    if _is_api(request):
        error = ERRORS[exceptions.NotFound]
        return JsonResponse(
            error_body(error.code, str(exceptions.NotFound.default_detail)), status=error.status
        )
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """Answer a crash under /api/ in the API's error shape; others get Django's page.

    Django calls this while handling the exception (raised in a middleware, or anywhere views
    do not catch it), so ``sys.exc_info()`` names it: a lost or busy database is a 503, not a
    bug.
    """
    exc = sys.exc_info()[1]
    if is_connection_loss(exc) or is_overload(exc):
        from config.middleware import unavailable_page

        return unavailable_page(request, busy=is_overload(exc))
    if _is_api(request):
        return JsonResponse(
            error_body(SERVER_ERROR.code, "Internal server error."), status=SERVER_ERROR.status
        )
    return defaults.server_error(request)
