"""What a caller sees of selections and locks: its own namespace's, within its wallet scope.

Clients sharing a wallet share its tokens and balances, never each other's transactions: a
selection of another namespace is reported missing, and listings leave it out.
"""

from __future__ import annotations

from typing import TypedDict

from django.db.models import Exists, OuterRef, QuerySet

from clients.permissions import request_namespace, wallet_scope
from common.rules import is_identifier
from locks.errors import SelectionNotFound
from locks.models import Selection
from locks.selections import get_selection


class Lookup(TypedDict):
    """Where a caller's selection is looked for: a namespace (None: every one) and wallets."""

    namespace: str | None
    wallets: list[str] | None


class WriteLookup(TypedDict):
    """The same for an operation that changes the selection: always one namespace."""

    namespace: str
    wallets: list[str] | None


def lookup(request, tx_id: str) -> Lookup:
    """Return how to find the caller's selection ``tx_id``: its namespace and wallet scope.

    Another client's selection, or one in a wallet outside the key's scope, is reported
    missing, not forbidden, so keys cannot probe which transactions other clients run.
    """
    if not is_identifier(tx_id, path=True):
        raise SelectionNotFound(f"no selection for transaction {tx_id}")
    scope = wallet_scope(request)
    return {
        "namespace": request_namespace(request),
        "wallets": None if scope is None else sorted(scope),
    }


def write_lookup(request, tx_id: str) -> WriteLookup:
    """Return ``lookup`` for spend, release and extend, which only API keys may call.

    Staff sessions, the callers without a namespace, only read (``HasRight``); should one get
    here, no selection is theirs to change.
    """
    where = lookup(request, tx_id)
    namespace = where["namespace"]
    if namespace is None:
        raise SelectionNotFound(f"no selection for transaction {tx_id}")
    return {"namespace": namespace, "wallets": where["wallets"]}


def visible_selection(request, tx_id: str) -> Selection:
    """Return the selection of ``tx_id`` if the caller may see it; otherwise 404."""
    return get_selection(tx_id, **lookup(request, tx_id))


def own_selections(request, selections: QuerySet) -> QuerySet:
    """Restrict ``selections`` to the caller's namespace (staff sessions: every namespace).

    Listings show what ``lookup`` finds and nothing more: clients sharing a wallet see the
    wallet's tokens and balances, never each other's transactions.
    """
    namespace = request_namespace(request)
    return selections if namespace is None else selections.filter(namespace=namespace)


def own_locks(request, locks: QuerySet) -> QuerySet:
    """Restrict ``locks`` to those of the caller's selections (staff sessions: every lock).

    A lock row names its holder by tx id and fence, not by namespace; the fence is unique per
    wallet, so the selection's (fence, wallet) key finds its owner.
    """
    namespace = request_namespace(request)
    if namespace is None:
        return locks
    owner = Selection.objects.filter(
        namespace=namespace, fence=OuterRef("fence"), wallet=OuterRef("wallet")
    )
    return locks.filter(Exists(owner))
