"""Authenticate API clients by the key in ``Authorization: Api-Key <key>``."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework_api_key.permissions import KeyParser

from clients.models import ApiKey

MAX_KEY_LENGTH = 200


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
        try:
            key = ApiKey.objects.get_from_key(raw)
        except ApiKey.DoesNotExist:
            raise exceptions.AuthenticationFailed("Invalid API key.") from None
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
