"""An operator's admin journey in a real headless Chromium against a live server."""

from __future__ import annotations

import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from locks import dashboard as dashboard_figures
from locks.models import FailedSelection, HousekeepingRun, LockAudit, Selection, TokenLock
from tests.factories import lock_tokens, make_selection, make_token, make_tokens
from tests.helpers.processes import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = Path("/usr/bin/chromium")  # Debian's build: `make browser` installs it
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
USERNAME, PASSWORD = "operator", "correct-horse-battery"


@pytest.fixture(scope="module")
def browser():
    """Start Chromium once per module; fail loudly when it cannot start."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        pytest.fail(
            f"the playwright package is missing ({exc}); `make test` installs the "
            "dev extras, or run `.venv/bin/pip install -e '.[dev]'`",
            pytrace=False,
        )
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing; `make browser` installs Debian's chromium", pytrace=False
        )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    # Playwright's sync API keeps an event loop in this thread, so Django would refuse the
    # plain synchronous ORM calls the tests make between browser steps.
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        try:
            chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        except Exception as exc:  # any launch failure must fail the run, never skip it
            pytest.fail(f"Chromium at {CHROMIUM} did not start: {exc}", pytrace=False)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, live_server, django_user_model):
    django_user_model.objects.create_superuser(USERNAME, "operator@example.com", PASSWORD)
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=live_server.url)
    tab = context.new_page()
    tab.set_default_timeout(20_000)
    yield tab
    context.close()


def shot(page, name: str) -> Path:
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def log_in(page) -> None:
    page.goto("/admin/login/?next=/admin/")
    shot(page, "01-login")
    page.fill("#id_username", USERNAME)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")
    assert "Site administration" in page.inner_text("#content")


def row_texts(page) -> list[str]:
    return page.locator("#result_list tbody tr").all_inner_texts()


def test_log_in_filter_locks_and_search_a_tx_id(page):
    lock_tokens([make_token(wallet="alice", tx_id="tx-alice")], spender="spender-live", ttl=60)
    lock_tokens([make_token(wallet="bob", tx_id="tx-bob")], spender="spender-dead", ttl=-120)
    log_in(page)
    page.locator("a[href='/admin/locks/tokenlock/']").first.click()
    page.wait_for_selector("#result_list")
    assert len(row_texts(page)) == 2

    page.locator("details[data-filter-title='state'] a", has_text="expired").click()
    page.wait_for_url("**state=expired**")
    rows = row_texts(page)
    assert len(rows) == 1 and "tx-bob:0" in rows[0] and "expired" in rows[0]

    page.fill("details[data-filter-title='wallet'] input[name=wallet]", "bob")
    page.press("details[data-filter-title='wallet'] input[name=wallet]", "Enter")
    page.wait_for_url("**wallet=bob**")
    assert "state=expired" in page.url  # the box keeps the other filters
    assert len(row_texts(page)) == 1
    shot(page, "02-locks-filtered")

    page.goto("/admin/locks/tokenlock/")
    page.fill("#searchbar", "tx-alice")
    page.press("#searchbar", "Enter")
    page.wait_for_url("**q=tx-alice**")
    rows = row_texts(page)
    assert len(rows) == 1 and "spender-live" in rows[0] and "live" in rows[0]
    shot(page, "03-locks-search")


def test_force_release_with_a_reason_and_see_the_audit(page):
    stuck = make_tokens(2, wallet="carol")
    lock_tokens(stuck, spender="stuck-tx", ttl=60)
    lock_tokens([make_token(wallet="dave")], spender="busy-tx", ttl=60)
    log_in(page)
    page.goto("/admin/locks/tokenlock/?q=stuck-tx")
    page.check("#action-toggle")
    page.select_option("select[name=action]", "force_release")
    page.click("button[name=index]")
    page.wait_for_selector("textarea[name=reason]")
    assert "Force-release 2 locks?" in page.inner_text("#content")
    assert page.get_attribute("textarea[name=reason]", "required") is not None
    shot(page, "04-force-release-confirm")

    page.fill("textarea[name=reason]", "replica r3 crashed holding these")
    page.click("input[value='Yes, force release']")
    page.wait_for_selector("ul.messagelist")
    assert "Force-released 2 lock(s)" in page.inner_text("ul.messagelist")
    assert list(TokenLock.objects.values_list("spender_tx_id", flat=True)) == ["busy-tx"]

    page.goto("/admin/locks/lockaudit/")
    page.fill("#searchbar", "stuck-tx")
    page.press("#searchbar", "Enter")
    page.wait_for_url("**q=stuck-tx**")
    rows = row_texts(page)
    assert len(rows) == 1
    assert USERNAME in rows[0] and "replica r3 crashed" in rows[0] and "stuck-tx" in rows[0]
    shot(page, "05-lock-audit")
    assert LockAudit.objects.get().user.username == USERNAME


def seed_dashboard() -> None:
    now = timezone.now()
    usd = make_tokens(400, wallet="wallet-7", currency="USD", quantity=250)
    make_tokens(300, wallet="wallet-3", currency="EUR", quantity=120)
    make_tokens(150, wallet="wallet-9", currency="CHF", quantity=80)
    # "Expiring" means within EXPIRING_WITHIN, which the test widens to ten minutes: on a slow
    # host, seconds pass between seeding and rendering.
    lock_tokens(usd[:60], spender="tx-busy", ttl=3600)
    lock_tokens(usd[60:70], spender="tx-soon", ttl=300)
    lock_tokens(usd[70:85], spender="tx-stale", ttl=-90)
    selections, failures = [], []
    # 59 minutes, each stamped at the start of its minute: the chart's hour-long window still
    # holds all of them if the clock turns a minute between seeding and rendering.
    this_minute = now.replace(second=0, microsecond=0)
    for minute in range(59):
        at = this_minute - timedelta(minutes=minute)
        for i in range(8 + (minute * 7) % 13):
            selections.append(
                Selection(
                    tx_id=f"ok-{minute}-{i}",
                    wallet="wallet-7",
                    currency="USD",
                    quantity=10,
                    total=10,
                    token_ids=[],
                    status=Selection.Status.SPENT,
                    created_at=at,
                )
            )
        for i in range((minute * 5) % 4):
            failures.append(
                FailedSelection(
                    tx_id=f"short-{minute}-{i}",
                    wallet="wallet-3",
                    currency="EUR",
                    quantity=10**6,
                    outcome=FailedSelection.Outcome.INSUFFICIENT_FUNDS,
                    created_at=at,
                )
            )
        for i in range(3 if 20 <= minute < 26 else minute % 2):
            failures.append(
                FailedSelection(
                    tx_id=f"locked-{minute}-{i}",
                    wallet="wallet-7",
                    currency="USD",
                    quantity=900,
                    outcome=FailedSelection.Outcome.FUNDS_LOCKED,
                    lock_conflicts=4,
                    created_at=at,
                )
            )
    Selection.objects.bulk_create(selections)
    FailedSelection.objects.bulk_create(failures)
    HousekeepingRun.objects.create(
        started_at=now - timedelta(seconds=8), finished_at=now, expired_removed=42, spent_removed=7
    )


def test_dashboard_opens_from_the_index(page, monkeypatch):
    monkeypatch.setattr(dashboard_figures, "EXPIRING_WITHIN", timedelta(minutes=10))
    seed_dashboard()
    log_in(page)
    page.click("#selector-dashboard-module a")
    page.wait_for_selector("#dash-supply")
    supply = page.inner_text("#dash-supply")
    assert "USD" in supply and "100,000" in supply and "82,500" in supply  # supply, available
    assert page.inner_text("#locks-live") == "70"
    assert page.inner_text("#locks-expiring") == "10"
    assert page.inner_text("#locks-expired") == "15"
    assert page.locator("svg.outcomes rect.ok").count() == 59
    assert page.locator("svg.outcomes rect.locked").count() > 0
    assert "wallet-7" in page.inner_text("#dash-contended")
    assert "42 expired" in page.inner_text("#dash-housekeeping")
    dashboard = shot(page, "06-dashboard")
    assert dashboard.stat().st_size > 10_000
    if os.environ.get("UPDATE_DOCS_SCREENSHOT"):  # refresh the README picture on purpose only
        shutil.copyfile(dashboard, ROOT / "docs" / "admin-dashboard.png")


def test_wallet_page_from_a_list_release_and_extend_a_selection(page):
    tokens = make_tokens(40, wallet="wallet-7", currency="USD", quantity=25)
    make_tokens(10, wallet="wallet-7", currency="EUR", quantity=12)
    # Both live until the end on a slow host; the extension below still adds over 200 s.
    make_selection(tokens[:6], "pay-stuck", ttl=180)
    make_selection(tokens[6:10], "pay-slow", ttl=90)
    lock_tokens(tokens[10:13], spender="pay-crashed", ttl=-30)
    FailedSelection.objects.bulk_create(
        FailedSelection(
            tx_id=f"pay-big-{i}",
            wallet="wallet-7",
            currency="USD",
            quantity=1500,
            outcome=FailedSelection.Outcome.FUNDS_LOCKED,
            lock_conflicts=3,
        )
        for i in range(3)
    )
    log_in(page)
    page.goto("/admin/locks/selection/")
    page.locator("#result_list a.wallet-link", has_text="wallet-7").first.click()
    page.wait_for_selector("#wallet-balances")
    assert page.url.endswith("/admin/wallets/wallet-7/")
    balances = page.inner_text("#wallet-balances")
    assert "1,000" in balances and "250" in balances and "750" in balances  # unspent, locked
    assert "funds locked by others for 1,500 USD (750 available now)" in page.inner_text(
        "#wallet-notes"
    )
    live = page.locator("#wallet-live tbody tr")
    assert live.count() == 2 and "pay-slow" in live.nth(0).inner_text()  # soonest expiry first
    assert "pay-crashed" in page.inner_text("#wallet-locks")
    assert "pay-big-2" in page.inner_text("#wallet-failures")
    shot(page, "07-wallet")

    page.locator("#wallet-live tr[data-tx-id='pay-stuck'] button[name=release]").click()
    page.wait_for_selector("ul.messagelist")
    # The admin capitalises messages: "Pay-stuck: ..."
    assert "pay-stuck: released, 6 lock(s) removed" in page.inner_text("ul.messagelist").lower()
    assert page.locator("#wallet-live tbody tr").count() == 1
    assert Selection.objects.get(tx_id="pay-stuck").status == Selection.Status.RELEASED

    before = Selection.objects.get(tx_id="pay-slow").expires_at
    row = page.locator("#wallet-live tr[data-tx-id='pay-slow']")
    row.locator("input[name=seconds]").fill("300")
    row.locator("button[name=extend]").click()
    page.wait_for_selector("ul.messagelist")
    assert "pay-slow: lease extended until" in page.inner_text("ul.messagelist").lower()
    after = Selection.objects.get(tx_id="pay-slow").expires_at
    assert after > before + timedelta(seconds=200)
    left = page.inner_text("#wallet-live tr[data-tx-id='pay-slow'] .lease-left")
    assert int(left.split()[0]) > 250
    wallet = shot(page, "08-wallet-after-actions")
    audits = {a.action: a.user.username for a in LockAudit.objects.select_related("user")}
    assert audits == {"release_selection": USERNAME, "extend_selection": USERNAME}
    if os.environ.get("UPDATE_DOCS_SCREENSHOT"):
        shutil.copyfile(wallet, ROOT / "docs" / "admin-wallet.png")
