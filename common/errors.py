"""The one shape of every API error, ``{"code", "detail", "fields"}``, and its schema.

Views describe the errors an endpoint may answer with ``error_responses``; which error becomes
which status and code is decided in one place above every app, ``config.exceptions``.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers


class ErrorSerializer(serializers.Serializer):
    """The body of every error response."""

    code = serializers.CharField(help_text="Stable snake_case error code.")
    detail = serializers.CharField(help_text="Human-readable explanation.")
    # DRF's metaclass moves declared fields off the class, so this does not shadow
    # Serializer.fields; django-stubs sees only the class attribute.
    fields = serializers.DictField(  # type: ignore[assignment]
        child=serializers.ListField(child=serializers.CharField()),
        help_text="Validation messages by field path; empty for other errors.",
    )
    available = serializers.CharField(
        required=False, help_text="insufficient_funds, funds_locked: quantity available now."
    )
    leg = serializers.CharField(
        required=False,
        help_text="insufficient_funds, funds_locked, no_exact_match, max_tokens_exceeded, "
        "selection_too_large of a selection with legs: the currency of the leg that failed "
        "(nothing stays locked).",
    )
    limit = serializers.IntegerField(
        required=False,
        help_text="selection_too_large: the most tokens one selection examines and locks.",
    )
    retry_after = serializers.FloatField(
        required=False,
        min_value=0,
        help_text="funds_locked: seconds after which a retry has a fair chance, as precise as "
        "the holds of the wallet last (Retry-After rounds it up to whole seconds).",
    )


def error_body(code: str, detail: str, fields: dict | None = None, **extra) -> dict:
    return {"code": code, "detail": detail, "fields": fields or {}, **extra}


def error_responses(*statuses: int, conflicts: str = "") -> dict[int, OpenApiResponse]:
    """Describe the error responses of an endpoint (``conflicts``: its 409 codes).

    Every endpoint that reaches the database may answer 503, and the web server refuses a
    request line that is too long with 414 (no JSON body) on any of them. The codes named
    here are the error table's (tests/integration/api/test_error_table.py checks it).
    """
    if 409 in statuses and not conflicts:
        raise ValueError("name the 409 codes of the endpoint in conflicts")
    described = {
        400: "invalid, malformed_json",
        401: "not_authenticated, authentication_failed",
        403: "permission_denied",
        404: "not_found",
        409: conflicts,
        413: "request_too_large",
        415: "unsupported_media_type",
        422: "value_not_conserved",
        429: "rate_limited (see Retry-After)",
        503: "database_unavailable, database_busy (see Retry-After)",
    }
    responses = {
        s: OpenApiResponse(ErrorSerializer, description=described[s])
        for s in sorted({*statuses, 503})
    }
    responses[414] = OpenApiResponse(
        description=(
            "The request line (path and query) is longer than 8190 bytes: refused by the web "
            "server, with no JSON body."
        )
    )
    return dict(sorted(responses.items()))
