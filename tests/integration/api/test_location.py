"""A selection's URL (the Location of a new one) is the one ``reverse`` gives."""

from __future__ import annotations

import pytest
from django.urls import get_script_prefix, reverse, set_script_prefix
from hypothesis import given, settings
from hypothesis import strategies as st

from common.rules import is_identifier
from locks.views import selection_location


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=40).filter(lambda t: is_identifier(t, path=True)))
def test_a_selection_url_is_the_one_reverse_gives(tx_id):
    assert selection_location(tx_id) == reverse("selection-detail", args=[tx_id])


@pytest.mark.parametrize("tx_id", ["tx-1", "a b", "100%", "?#&=", "é/x", "ü", "~:@!$'()*+,;"])
@pytest.mark.parametrize("script_prefix", ["/", "/wallets/", "/tx-id/"])
def test_a_selection_url_keeps_the_script_prefix_and_quotes_as_reverse_does(tx_id, script_prefix):
    before = get_script_prefix()
    set_script_prefix(script_prefix)
    try:
        if "/" in tx_id:  # not a path segment: reverse refuses it, and so does the shortcut
            with pytest.raises(Exception) as refused:
                reverse("selection-detail", args=[tx_id])
            with pytest.raises(refused.type):
                selection_location(tx_id)
            return
        url = selection_location(tx_id)
        assert url == reverse("selection-detail", args=[tx_id])
        assert url.startswith(script_prefix + "api/v1/selections/")
    finally:
        set_script_prefix(before)
