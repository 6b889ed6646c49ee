"""Reading the operators' admin pages from tests: the changelists' addresses, and what one shows."""

from __future__ import annotations

from django.urls import reverse

# The changelists of locks, tokens and selections.
LOCKS = reverse("admin:locks_tokenlock_changelist")
TOKENS = reverse("admin:tokens_token_changelist")
SELECTIONS = reverse("admin:locks_selection_changelist")


def shown(client, url: str, **params) -> set:
    """Return the primary keys a changelist shows for these query parameters."""
    response = client.get(url, params)
    assert response.status_code == 200
    return {obj.pk for obj in response.context["cl"].result_list}
