"""/metrics: selections are counted, timed and broken down into the selector's work."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from locks import metrics, replica, services
from sherdlock import InsufficientFunds, SelectionStats
from tests.factories import make_tokens

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def plain_selector(settings):
    """A selector without a cache listener, fresh for each test."""
    settings.SHERDLOCK = {**settings.SHERDLOCK, "LISTEN": False}
    replica.reset()
    yield
    replica.reset()


def scrape(client) -> dict[tuple[str, tuple], float]:
    """GET /metrics and index its samples by (name, sorted labels)."""
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_selections_are_counted_by_outcome_and_timed(client):
    make_tokens(5, wallet="metered", quantity=10)
    before = scrape(client)
    services.select_tokens("metered-1", "metered", "USD", 25)
    with pytest.raises(InsufficientFunds):
        services.select_tokens("metered-2", "metered", "USD", 1_000)
    after = scrape(client)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("sherdlock_selections_total", outcome="success") == 1
    assert grew("sherdlock_selections_total", outcome="insufficient_funds") == 1
    assert grew("sherdlock_selections_total", outcome="funds_locked") == 0
    assert grew("sherdlock_selection_duration_seconds_count", outcome="success") == 1
    assert grew("sherdlock_selection_duration_seconds_sum", outcome="success") > 0
    assert grew("sherdlock_fetches_total") >= 2  # each selection fetched at least once
    assert grew("sherdlock_selection_retries_total") == 0
    # The housekeeping series stay exported next to the selection ones.
    assert ("sherdlock_housekeeping_deleted_total", (("kind", "expired"),)) in after


def test_a_repeated_request_is_not_counted_again(client):
    make_tokens(3, wallet="metered", quantity=10)
    services.select_tokens("metered-3", "metered", "USD", 5)
    before = scrape(client)
    services.select_tokens("metered-3", "metered", "USD", 5)  # answered from the selection
    assert value(scrape(client), "sherdlock_selections_total", outcome="success") == value(
        before, "sherdlock_selections_total", outcome="success"
    )


def test_record_selection_adds_the_work_of_its_stats(client):
    before = scrape(client)
    stats = SelectionStats(lock_attempts=4, lock_conflicts=3, fetches=2, cache_hits=1, rounds=3)
    metrics.record_selection(0.2, "funds_locked", stats)
    after = scrape(client)
    for name, grown in [
        ("sherdlock_lock_attempts_total", 4),
        ("sherdlock_lock_conflicts_total", 3),
        ("sherdlock_fetches_total", 2),
        ("sherdlock_cache_hits_total", 1),
        ("sherdlock_selection_retries_total", 2),
    ]:
        assert value(after, name) - value(before, name) == grown, name
    assert (
        value(
            after, "sherdlock_selection_duration_seconds_bucket", outcome="funds_locked", le="0.25"
        )
        - value(
            before, "sherdlock_selection_duration_seconds_bucket", outcome="funds_locked", le="0.25"
        )
        == 1
    )


def test_multiprocess_mode_reads_the_shared_directory(client, monkeypatch, tmp_path):
    """Under gunicorn a scrape must sum every worker's files, not its own registry."""
    metrics.record_selection(0.01, "success", None)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    samples = scrape(client)
    # No worker wrote a file in the empty directory, so nothing of this process shows.
    assert not any(name.startswith("sherdlock_selections") for name, _ in samples)


def test_selections_inputs_and_change_are_counted_per_strategy(client):
    from sherdlock import NoExactMatch, Strategy

    for quantity in (1, 200, 7):
        make_tokens(1, wallet="strat", quantity=quantity)
    before = scrape(client)
    services.select_tokens("s-1", "strat", "USD", 150, strategy=Strategy("fewest_tokens"))
    with pytest.raises(NoExactMatch):
        services.select_tokens("s-2", "strat", "USD", 5, strategy=Strategy("exact"))
    services.select_tokens("s-3", "strat", "USD", 8, strategy=Strategy("exact"))
    after = scrape(client)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    selections = "sherdlock_strategy_selections_total"
    assert grew(selections, strategy="fewest_tokens", outcome="success") == 1
    assert grew(selections, strategy="exact", outcome="success") == 1
    assert grew(selections, strategy="exact", outcome="no_match") == 1
    assert grew("sherdlock_selections_total", outcome="no_match") == 1
    assert grew("sherdlock_selection_inputs_total", strategy="exact") == 2
    assert grew("sherdlock_selection_change_total", strategy="fewest_tokens") == 50
    assert grew("sherdlock_selection_change_total", strategy="exact") == 0
