"""The operators' force release of locks in the admin: confirmation, reason, audit, rights."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.urls import reverse

from locks.models import LockAudit, TokenLock
from tests.factories import lock_tokens, make_lock, make_token, make_tokens
from tests.helpers.admin import shown

pytestmark = pytest.mark.django_db

LOCKS = reverse("admin:locks_tokenlock_changelist")
TOKENS = reverse("admin:tokens_token_changelist")
AUDITS = reverse("admin:locks_lockaudit_changelist")
DASHBOARD = reverse("admin-dashboard")


@pytest.fixture(autouse=True)
def fresh_cache():
    cache.clear()  # the currency list is cached between page loads


def test_login_needed_and_viewers_cannot_force_release(client, django_user_model):
    from django.contrib.auth.models import Permission

    for url in (TOKENS, LOCKS, DASHBOARD):
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]
    viewer = django_user_model.objects.create_user("viewer", password="x", is_staff=True)
    client.force_login(viewer)
    assert client.get(DASHBOARD).status_code == 403
    viewer.user_permissions.add(Permission.objects.get(codename="view_tokenlock"))
    lock = make_lock(make_token(), "holder")
    page = client.get(LOCKS)
    assert page.context["cl"].model_admin.get_actions(page.wsgi_request) == {}
    client.post(
        LOCKS,
        {
            "action": "force_release",
            "_selected_action": [lock.pk],
            "post": "yes",
            "reason": "not mine to release",
        },
    )
    assert TokenLock.objects.filter(pk=lock.pk).exists()
    assert not LockAudit.objects.exists()
    assert client.get(DASHBOARD).status_code == 200


def post_force_release(admin_client, locks, reason=None, url=LOCKS, **extra):
    data = {"action": "force_release", "_selected_action": [lock.pk for lock in locks], **extra}
    if reason is not None:  # confirm what the confirmation page showed
        shown = admin_client.post(url, data).context["locks"]
        data.update(post="yes", reason=reason, locks=shown)
    return admin_client.post(url, data)


def test_force_release_asks_for_a_reason_then_deletes_and_audits(admin_client, admin_user):
    locks = lock_tokens(make_tokens(3), spender="stuck-tx")
    kept = lock_tokens([make_token()], spender="other")[0]
    confirm = post_force_release(admin_client, locks[:2])
    assert confirm.templates[0].name == "admin/locks/tokenlock/force_release.html"
    assert 'name="reason"' in confirm.content.decode()
    assert TokenLock.objects.count() == 4

    assert post_force_release(admin_client, locks[:2], reason="replica crashed").status_code == 302
    assert set(TokenLock.objects.values_list("pk", flat=True)) == {locks[2].pk, kept.pk}
    audit = LockAudit.objects.get()
    assert (audit.user, audit.reason, audit.count, audit.action) == (
        admin_user,
        "replica crashed",
        2,
        "force_release",
    )
    assert sorted(audit.token_ids) == sorted(lock.pk for lock in locks[:2])
    assert audit.spender_tx_ids == ["stuck-tx"]


@pytest.mark.parametrize("reason", ["", "   "])
def test_force_release_refuses_without_a_reason(admin_client, reason):
    locks = lock_tokens(make_tokens(2))
    response = post_force_release(admin_client, locks, reason=reason)
    assert response.status_code == 200
    assert response.context["form"].errors["reason"]
    assert TokenLock.objects.count() == 2
    assert not LockAudit.objects.exists()


def test_force_release_of_everything_a_filter_selects(admin_client):
    expired = lock_tokens(make_tokens(3, wallet="gone"), spender="dead", ttl=-5)
    live = lock_tokens(make_tokens(2, wallet="busy"), spender="alive")
    assert (
        post_force_release(
            admin_client,
            expired[:1],
            reason="sweep",
            url=f"{LOCKS}?state=expired",
            select_across="1",
        ).status_code
        == 302
    )
    assert set(TokenLock.objects.values_list("pk", flat=True)) == {lock.pk for lock in live}
    assert LockAudit.objects.get().count == 3


def test_lock_audit_is_listed_read_only_and_searchable(admin_client, admin_user):
    LockAudit.objects.create(
        user=admin_user, reason="replica r2 died", count=1, spender_tx_ids=["tx-77"], token_ids=[5]
    )
    LockAudit.objects.create(
        user=admin_user, reason="drill", count=1, spender_tx_ids=["tx-88"], token_ids=[6]
    )

    first, second = LockAudit.objects.order_by("pk")
    for term, expected in (("r2 died", first), ("tx-88", second), ("5", first)):
        assert shown(admin_client, AUDITS, q=term) == {expected.pk}, term
    assert admin_client.get(reverse("admin:locks_lockaudit_add")).status_code == 403
    change = reverse("admin:locks_lockaudit_change", args=[first.pk])
    assert admin_client.get(change).status_code == 200
    assert admin_client.post(change, {"reason": "edited"}).status_code == 403
