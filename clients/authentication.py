"""Authenticate API clients by the key in ``Authorization: Api-Key <key>``.

A key is looked up in the database once per process per ``KEY_CACHE_SECONDS``: a key revoked,
expired or rescoped in the admin takes effect within that time. The secret is checked against
the stored hash (constant-time) on every request, cached or not.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from django.contrib.auth.models import AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework_api_key.permissions import KeyParser

from clients.models import ApiKey

# Seconds a process trusts a key it read: a revocation takes effect within this, and a busy
# client costs one key lookup per process in this time instead of one per request.
KEY_CACHE_SECONDS = 5.0
MAX_KEY_LENGTH = 200
MAX_CACHED_KEYS = 10_000


class KeyCache:
    """Keys by prefix, each kept for a while after it was read; thread-safe, bounded (LRU)."""

    def __init__(self, clock=time.monotonic) -> None:
        self._clock = clock
        self._keys: OrderedDict[str, tuple[ApiKey, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, prefix: str) -> ApiKey | None:
        """Return the usable key with this prefix, from the cache while it is fresh."""
        ttl = KEY_CACHE_SECONDS
        now = self._clock()
        with self._lock:
            entry = self._keys.get(prefix)
            if entry is not None and now - entry[1] < ttl:
                self._keys.move_to_end(prefix)
                return entry[0]
        key = ApiKey.objects.get_usable_keys().filter(prefix=prefix).first()
        if key is not None and ttl > 0:
            with self._lock:
                self._keys[prefix] = (key, now)
                while len(self._keys) > MAX_CACHED_KEYS:
                    self._keys.popitem(last=False)
        return key

    def clear(self) -> None:
        """Forget every cached key."""
        with self._lock:
            self._keys.clear()


keys = KeyCache()


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """Set ``request.auth`` to the client's ApiKey; ``request.user`` stays anonymous.

    A request without the header is left to the next authenticator (staff sessions); a header
    naming a missing, revoked or expired key fails with 401.
    """

    keyword = KeyParser.keyword
    key_parser = KeyParser()

    def authenticate(self, request) -> tuple[AnonymousUser, ApiKey] | None:
        raw = self.key_parser.get(request)
        if raw is None:
            return None
        raw = raw.strip()
        # Bounded and printable before it reaches a query: PostgreSQL rejects NUL bytes.
        if not raw or len(raw) > MAX_KEY_LENGTH or not raw.isprintable():
            raise exceptions.AuthenticationFailed("Invalid API key.")
        prefix, _, _ = raw.partition(".")
        key = keys.get(prefix)
        if key is None or not key.is_valid(raw):  # a constant-time comparison of hashes
            raise exceptions.AuthenticationFailed("Invalid API key.")
        if key.has_expired:
            raise exceptions.AuthenticationFailed("API key has expired.")
        return AnonymousUser(), key

    def authenticate_header(self, request) -> str:
        # Makes DRF answer 401 (not 403) with this challenge when credentials are missing.
        return self.keyword


class ApiKeyScheme(OpenApiAuthenticationExtension):
    """Describe the key header in the OpenAPI schema, so Swagger UI can send it."""

    target_class = ApiKeyAuthentication
    name = "ApiKey"

    def get_security_definition(self, auto_schema) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": 'Send "Api-Key <key>"; keys are created in the admin.',
        }
