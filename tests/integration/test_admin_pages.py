"""Admin pages for tokens and locks load for an operator."""

import pytest
from django.urls import reverse

from tests.factories import make_lock, make_token

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("model", ["tokens_token", "locks_tokenlock"])
def test_changelist_and_change_pages_load(admin_client, model):
    token = make_token(tx_id="tx-admin", index=3)
    make_lock(token, "spender-admin")
    changelist = admin_client.get(reverse(f"admin:{model}_changelist"))
    assert changelist.status_code == 200
    assert b"tx-admin" in changelist.content or b"spender-admin" in changelist.content
    change = admin_client.get(reverse(f"admin:{model}_change", args=[token.pk]))
    assert change.status_code == 200


def test_admin_requires_login(client):
    response = client.get(reverse("admin:tokens_token_changelist"))
    assert response.status_code == 302
    assert "/login/" in response["Location"]
