"""Reading the operators' admin pages from tests."""

from __future__ import annotations


def shown(client, url: str, **params) -> set:
    """Return the primary keys a changelist shows for these query parameters."""
    response = client.get(url, params)
    assert response.status_code == 200
    return {obj.pk for obj in response.context["cl"].result_list}
