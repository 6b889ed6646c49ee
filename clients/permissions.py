"""Rights and wallet scope of API keys; staff sessions may read what their permissions show.

A view names the right each HTTP method needs in ``rights`` (safe methods default to
``can_read``), and the Django model permissions a staff session needs to read it in
``read_permissions`` (none declared: sessions may not read it). Wallet scope is checked by the
views with the helpers below, because the wallet comes from the body, the path or the query
string.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import QuerySet
from rest_framework import exceptions, permissions

from clients.models import ApiKey
from common.rules import is_identifier

READ = "can_read"
ISSUE = "can_issue"
SELECT = "can_select"


def api_key(request) -> ApiKey | None:
    """Return the request's ApiKey, or None for a session (or anonymous) request."""
    return request.auth if isinstance(request.auth, ApiKey) else None


def is_staff_session(request) -> bool:
    user = getattr(request, "user", None)
    return api_key(request) is None and bool(user and user.is_active and user.is_staff)


class HasRight(permissions.BasePermission):
    """Require the right the view maps to the request's method.

    API keys need the named flag; staff sessions may use safe methods only, so every write
    is attributable to a client key, and only with the view permissions of the models the
    view reads (the same ones the admin asks for), across all wallets.
    """

    message = "This operation is not allowed."

    def has_permission(self, request, view) -> bool:
        if not hasattr(view, request.method.lower()):
            # Let an authenticated caller learn the method is not allowed (405), not refused.
            return api_key(request) is not None or request.user.is_authenticated
        right = required_right(request, view)
        if right is None:
            return False
        key = api_key(request)
        if key is not None:
            self.message = f"This API key lacks the {right.removeprefix('can_')} right."
            return bool(getattr(key, right))
        self.message = "Sessions may only read, and only staff sessions; use an API key."
        safe = request.method in permissions.SAFE_METHODS
        if not (safe and right == READ and is_staff_session(request)):
            return False
        needed = getattr(view, "read_permissions", None)
        if not needed:
            return False
        self.message = f"This account lacks the permission(s) {', '.join(needed)}."
        return request.user.has_perms(needed)


def required_right(request, view) -> str | None:
    rights = getattr(view, "rights", {})
    if request.method in rights:
        return rights[request.method]
    return READ if request.method in permissions.SAFE_METHODS else None


def wallet_scope(request) -> list[str] | None:
    """Return the wallets the caller may use, or None when it may use every wallet."""
    key = api_key(request)
    if key is None:
        return None if is_staff_session(request) else []
    return None if key.all_wallets else list(key.wallets)


def request_namespace(request) -> str | None:
    """Return the namespace of the caller's transaction ids; None (any) for staff sessions."""
    key = api_key(request)
    if key is not None:
        return key.namespace
    return None if is_staff_session(request) else ""


def may_use(request, wallet: str) -> bool:
    scope = wallet_scope(request)
    return scope is None or wallet in scope


def check_wallets(request, wallets: Iterable[str]) -> None:
    """Raise PermissionDenied naming the wallets the caller may not use."""
    scope = wallet_scope(request)
    if scope is None:
        return
    refused = sorted(set(wallets) - set(scope))
    if refused:
        raise exceptions.PermissionDenied(
            f"This API key may not use wallet(s): {', '.join(refused)}."
        )


def scope_queryset(request, queryset: QuerySet, field: str = "wallet") -> QuerySet:
    """Restrict ``queryset`` to the caller's wallets; refuse an explicit out-of-scope filter.

    Listings without a ``wallet`` filter return only the caller's wallets rather than failing,
    so a client with several wallets can page through all of them at once.
    """
    requested = request.query_params.get("wallet")
    # A malformed name is left to the filter's validation (400); the scope filter applies anyway.
    if is_identifier(requested):
        check_wallets(request, [requested])
    scope = wallet_scope(request)
    if scope is None:
        return queryset
    return queryset.filter(**{f"{field}__in": scope})
