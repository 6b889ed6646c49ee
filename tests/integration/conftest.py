"""Fixtures several integration test modules ask for."""

from __future__ import annotations

import pytest
from django.core.cache import cache


@pytest.fixture
def fresh_cache():
    """An empty cache: the admin caches its currency list between page loads."""
    cache.clear()
