"""Any text in any admin search box or filter answers 200 with no results, never a 500.

Every changelist of the admin site is tried, third-party ones included, with every parameter
its filters read and the search box, against tables that hold rows (so "no results" means the
text matched nothing, not that there was nothing to match).
"""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import reverse
from django.utils import timezone

from clients.models import ApiKey
from locks.models import FailedSelection, HousekeepingRun, LockAudit
from tests.factories import lock_tokens, make_selection, make_token

pytestmark = pytest.mark.django_db

# Text that no row holds: a superscript two (isdigit() but not int()), NUL (PostgreSQL text
# cannot hold it), emoji, other scripts' digits, numbers beyond every integer column, an index
# beyond the integer column, very long strings, and a tx_id:index with a bad index.
NASTY = ["²", "wallet-\x00", "🪙💸", "123456789012345678901234567890", "tx:99999999999", "x" * 3000]
# Admins built on third-party code get the same guard; by default they are tried with one text
# of each failure kind, and the long variant (`make test-slow`) tries everything everywhere.
FEW = ["²", "\x00", "x" * 3000]
MORE_NASTY = ["\x00", "٣", "tx:²", "²" * 200, "-1", "1e9", "NaN", "\\%_", "\u202e", "é" * 129]
PROJECT_APPS = ("tokens", "locks", "clients")

CHANGELISTS = sorted(
    (f"{model._meta.app_label}.{model._meta.model_name}" for model in admin.site._registry),
)


@pytest.fixture
def rows(admin_user):
    """One row in each of the project's tables the admin lists."""
    token = make_token(wallet="alice", tx_id="tx", index=1)
    make_selection([token], "sel-1")
    lock_tokens([make_token(wallet="bob")], spender="raw", ttl=-5)
    FailedSelection.objects.create(
        tx_id="f1",
        wallet="alice",
        currency="USD",
        quantity=1,
        outcome=FailedSelection.Outcome.FUNDS_LOCKED,
    )
    LockAudit.objects.create(
        user=admin_user, reason="drill", count=1, spender_tx_ids=["sel-1"], token_ids=[token.pk]
    )
    HousekeepingRun.objects.create(finished_at=timezone.now())
    ApiKey.objects.create_key(name="backend", wallets=["alice"])


def parameters(admin_client, url: str) -> list[str]:
    """Return the search parameter and every parameter the changelist's filters read."""
    response = admin_client.get(url)
    assert response.status_code == 200
    cl = response.context["cl"]
    names = ["q"] if cl.search_fields else []
    for spec in cl.filter_specs:
        names.extend(spec.expected_parameters())
    return names


def try_every_box(admin_client, label: str, texts: list[str]) -> None:
    app_label, model_name = label.split(".")
    url = reverse(f"admin:{app_label}_{model_name}_changelist")
    names = parameters(admin_client, url)
    for name in names:
        for text in texts:
            response = admin_client.get(url, {name: text})
            assert response.status_code == 200, (name, text)
            cl = response.context["cl"]
            assert cl.result_count == 0 and list(cl.result_list) == [], (name, text)


@pytest.mark.parametrize("label", CHANGELISTS)
def test_any_text_in_any_search_box_or_filter_finds_nothing(admin_client, rows, label):
    try_every_box(admin_client, label, NASTY if label.startswith(PROJECT_APPS) else FEW)


@pytest.mark.slow
@pytest.mark.parametrize("label", CHANGELISTS)
def test_more_text_in_any_search_box_or_filter_finds_nothing(admin_client, rows, label):
    try_every_box(admin_client, label, NASTY + MORE_NASTY)


@pytest.mark.parametrize("n, label", list(enumerate(CHANGELISTS)))
def test_more_text_in_some_search_box_or_filter_finds_nothing(admin_client, rows, n, label):
    """The long variant in brief: each changelist tries one more text, in turn, so that every
    one of them is tried in some changelist."""
    try_every_box(admin_client, label, [MORE_NASTY[n % len(MORE_NASTY)]])


def test_the_brief_variant_tries_every_text():
    assert len(CHANGELISTS) >= len(MORE_NASTY)


def test_every_changelist_was_tried_with_its_filters_and_search():
    # The parametrisation above must reach the project's and third-party admins alike.
    assert {
        "tokens.token",
        "locks.tokenlock",
        "locks.selection",
        "locks.failedselection",
        "locks.lockaudit",
        "locks.housekeepingrun",
        "clients.apikey",
        "auth.user",
        "django_celery_beat.periodictask",
    } <= set(CHANGELISTS)


@pytest.mark.parametrize(
    "params",
    [{"q": "tx:1"}, {"q": "alice"}, {"wallet": "bob"}, {"currency": "USD"}, {"state": "expired"}],
)
def test_ordinary_text_still_finds_its_rows(admin_client, rows, params):
    url = reverse(
        "admin:locks_tokenlock_changelist"
        if "wallet" in params or "state" in params
        else "admin:tokens_token_changelist"
    )
    assert admin_client.get(url, params).context["cl"].result_count >= 1


def test_an_unknown_parameter_is_still_djangos_redirect(admin_client):
    response = admin_client.get(reverse("admin:tokens_token_changelist"), {"no_such": "1"})
    assert response.status_code == 302 and "e=1" in response["Location"]
