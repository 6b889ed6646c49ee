"""Selection endpoints (select, read, spend, release, extend) and the lock table listing."""

from __future__ import annotations

import functools
from urllib.parse import quote

from django.db.models import Case, Value, When
from django.db.models.functions import Now
from django.urls import get_script_prefix, reverse
from django.utils.http import RFC3986_SUBDELIMS
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from clients.permissions import (
    SELECT,
    check_wallets,
    request_namespace,
    scope_queryset,
)
from clients.throttling import charge_now, charging, selection_buckets
from common.errors import error_responses
from common.pagination import IdCursorPagination
from common.rules import ID_MAX_LENGTH, identifier_schema
from locks.filters import LockFilter, SelectionFilter
from locks.legs import select_tokens_legs
from locks.models import Selection, TokenLock
from locks.request_serializers import (
    MAX_WAIT_SECONDS,
    SELECT_REQUEST_SCHEMA,
    ExtendSerializer,
    SpendSerializer,
    select_request,
)
from locks.scoping import own_locks, own_selections, visible_selection, write_lookup
from locks.selections import (
    extend_selection,
    release_selection,
    spend_selection,
)
from locks.serializers import (
    LockSerializer,
    SelectionSerializer,
    SpendResultSerializer,
    selection_body,
    spend_body,
    tokens_by_id,
)
from locks.services import select_tokens
from locks.strategies import TERMS, strategy_of

TX_ID = OpenApiParameter(
    "tx_id",
    identifier_schema(ID_MAX_LENGTH, path=True),
    OpenApiParameter.PATH,
    description="The spending transaction that owns the selection.",
)
# A selection's answer shows its tokens too.
SELECTION_READ = ("locks.view_selection", "tokens.view_token")


class SelectionListCreate(generics.ListAPIView):
    """List selections (GET) or select and lock tokens for a transaction (POST)."""

    rights = {"POST": SELECT}
    read_permissions = SELECTION_READ
    serializer_class = SelectionSerializer
    filterset_class = SelectionFilter
    pagination_class = IdCursorPagination

    def get_queryset(self):
        selections = own_selections(self.request, Selection.objects.with_state())
        return scope_queryset(self.request, selections)

    def get_serializer_context(self):
        context = super().get_serializer_context()
        if getattr(self, "page", None) is not None:
            context["tokens_by_id"] = tokens_by_id(self.page)
        return context

    def paginate_queryset(self, queryset):
        self.page = super().paginate_queryset(queryset)
        return self.page

    @extend_schema(
        summary="List selections",
        tags=["selections"],
        description=(
            "The API key's own selections (those of its namespace); without a wallet filter, "
            "in the wallets of the key."
        ),
        responses={200: SelectionSerializer(many=True), **error_responses(400, 401, 403, 404)},
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        summary="Select tokens",
        description=(
            "Lock tokens worth at least `quantity` for `tx_id`, picked by `strategy` (default "
            "random); or, with `legs` instead of `currency` and `quantity`, tokens of each "
            "leg's currency, all legs or none (a failing leg's error names it in `leg`). 201 "
            "with the selection; an identical repeat answers 200 with the same body. 409 "
            "codes: tx_id_conflict (same tx_id, other terms), insufficient_funds (with "
            "`available`), funds_locked (other transactions hold the funds; see Retry-After), "
            "no_exact_match (exact), max_tokens_exceeded (consolidate), selection_too_large "
            "(covering the quantity takes more than 1000 tokens). 429 rate_limited per "
            "key or wallet."
        ),
        request=SELECT_REQUEST_SCHEMA,
        tags=["selections"],
        responses={
            201: SelectionSerializer,
            200: SelectionSerializer,
            **error_responses(
                400,
                401,
                403,
                409,
                413,
                415,
                429,
                conflicts=(
                    "tx_id_conflict, insufficient_funds, funds_locked, no_exact_match, "
                    "max_tokens_exceeded, selection_too_large"
                ),
            ),
        },
    )
    def post(self, request):
        # Only selecting costs lock-table work worth limiting; reads are not throttled. The
        # units are taken by the statement that locks (clients.throttling.charging).
        with charging(selection_buckets(request)):
            return self._select(request)

    def _select(self, request):
        serializer = select_request(request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        strategy = strategy_of(data)
        for name in ("strategy", *TERMS):
            data.pop(name, None)
        check_wallets(request, [data["wallet"]])
        headers: dict[str, str] = {}
        if "legs" in data:
            # Several currencies: never waits (a Prefer: wait is a hint, and is not applied).
            selection, created = select_tokens_legs(
                data["tx_id"],
                data["wallet"],
                [(leg["currency"], leg["quantity"]) for leg in data["legs"]],
                namespace=request_namespace(request),
                strategy=strategy,
            )
            return self._answer(selection, created, headers)
        wait = data.pop("wait", None)
        if wait is None and (wait := preferred_wait(request)) is not None:
            headers["Preference-Applied"] = f"wait={wait}"
        if wait:
            charge_now()  # refused before it waits, not after
        selection, created = select_tokens(
            **data, namespace=request_namespace(request), wait=float(wait or 0), strategy=strategy
        )
        return self._answer(selection, created, headers)

    def _answer(self, selection: Selection, created: bool, headers: dict[str, str]) -> Response:
        body = selection_body(selection)
        if not created:
            return Response(body, headers=headers)
        headers["Location"] = selection_location(selection.tx_id)
        return Response(body, status=status.HTTP_201_CREATED, headers=headers)


_TX_ID_MARKER = "tx-id"


def selection_location(tx_id: str) -> str:
    """Return the URL of selection ``tx_id``: ``reverse("selection-detail", args=[tx_id])``.

    ``reverse`` matches its arguments against every pattern of the name at every call, a
    noticeable share of a select's server CPU. The URL around the id depends only on the
    script prefix; the id is quoted as ``reverse`` quotes it.
    """
    if "/" in tx_id or not tx_id:  # not a path segment: reverse says so
        return reverse("selection-detail", args=[tx_id])
    head, tail = _location_around(get_script_prefix())
    return head + quote(tx_id, safe=RFC3986_SUBDELIMS + "/~:@") + tail


@functools.lru_cache(maxsize=16)
def _location_around(script_prefix: str) -> tuple[str, str]:
    # The last occurrence is the id's: a script prefix could hold the marker too.
    head, _, tail = reverse("selection-detail", args=[_TX_ID_MARKER]).rpartition(_TX_ID_MARKER)
    return head, tail


def preferred_wait(request) -> int | None:
    """Return the seconds of a ``Prefer: wait=N`` header (RFC 7240), capped; None without one.

    Preferences are hints: a malformed one is ignored, as the RFC asks.
    """
    for header in request.META.get("HTTP_PREFER", "").split(","):
        name, _, value = header.split(";", 1)[0].strip().partition("=")
        if name.strip().lower() == "wait":
            value = value.strip().strip('"')
            if value.isascii() and value.isdigit():
                return min(int(value), MAX_WAIT_SECONDS)
    return None


class SelectionDetail(APIView):
    """Read one selection."""

    read_permissions = SELECTION_READ

    @extend_schema(
        summary="Get a selection",
        parameters=[TX_ID],
        tags=["selections"],
        responses={200: SelectionSerializer, **error_responses(401, 403, 404)},
    )
    def get(self, request, tx_id: str):
        return Response(selection_body(visible_selection(request, tx_id)))


class SelectionSpend(APIView):
    """Spend a selection: mark its tokens spent and create the outputs, atomically."""

    rights = {"POST": SELECT}

    @extend_schema(
        summary="Spend a selection",
        description=(
            "One transaction: the inputs are marked spent and the outputs created as tokens "
            "`tx_id:index`. Outputs must sum exactly to the selection's total in its currency "
            "(422 value_not_conserved); they may pay any wallet. Repeating the same spend "
            "answers 200 without a second effect. 409 codes: lease_lost, not_locked (released),"
            " already_spent (spent with other outputs), output_conflict."
        ),
        parameters=[TX_ID],
        request=SpendSerializer,
        tags=["selections"],
        responses={
            200: SpendResultSerializer,
            **error_responses(
                400,
                401,
                403,
                404,
                409,
                413,
                415,
                422,
                conflicts=("lease_lost, not_locked, already_spent, output_conflict"),
            ),
        },
    )
    def post(self, request, tx_id: str):
        where = write_lookup(request, tx_id)
        serializer = SpendSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        outcome = spend_selection(tx_id, serializer.specs(tx_id), **where)
        return Response(spend_body(outcome.selection))


class SelectionRelease(APIView):
    """Release a selection's locks; repeating it is harmless."""

    rights = {"POST": SELECT}

    @extend_schema(
        summary="Release a selection",
        description="Idempotent. 409 already_spent once the selection was spent.",
        parameters=[TX_ID],
        request=None,
        tags=["selections"],
        responses={
            200: SelectionSerializer,
            **error_responses(401, 403, 404, 409, conflicts="already_spent"),
        },
    )
    def post(self, request, tx_id: str):
        outcome = release_selection(tx_id, **write_lookup(request, tx_id))
        return Response(selection_body(outcome.selection))


class SelectionExtend(APIView):
    """Renew the lease of a selection's locks."""

    rights = {"POST": SELECT}

    @extend_schema(
        summary="Extend a selection's lease",
        description=(
            "Renew every lock for `seconds` (default: the configured lease), capped at the "
            "selection's maximum lifetime. 409 codes: lease_lost, not_locked, already_spent."
        ),
        parameters=[TX_ID],
        request=ExtendSerializer,
        tags=["selections"],
        responses={
            200: SelectionSerializer,
            **error_responses(
                400, 401, 403, 404, 409, 413, 415, conflicts="lease_lost, not_locked, already_spent"
            ),
        },
    )
    def post(self, request, tx_id: str):
        where = write_lookup(request, tx_id)
        serializer = ExtendSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        outcome = extend_selection(tx_id, serializer.validated_data.get("seconds"), **where)
        return Response(selection_body(outcome.selection))


class LockPagination(IdCursorPagination):
    ordering = "-pk"


class LockList(generics.ListAPIView):
    """List the lock table joined with its tokens."""

    read_permissions = ("locks.view_tokenlock", "tokens.view_token")
    serializer_class = LockSerializer
    filterset_class = LockFilter
    pagination_class = LockPagination

    def get_queryset(self):
        locks = TokenLock.objects.select_related("token").annotate(
            state=Case(When(expires_at__gt=Now(), then=Value("live")), default=Value("expired"))
        )
        return scope_queryset(self.request, own_locks(self.request, locks), field="token__wallet")

    @extend_schema(
        summary="List locks",
        tags=["locks"],
        description=(
            "The locks of the API key's own selections (those of its namespace); without a "
            "wallet filter, in the wallets of the key."
        ),
        responses={200: LockSerializer(many=True), **error_responses(400, 401, 403, 404)},
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)
