"""The API's JSON parser: bounded in size, and every failure to parse is a 400."""

from __future__ import annotations

import json

from django.conf import settings
from rest_framework import exceptions, parsers, status
from rest_framework.exceptions import ParseError


class RequestTooLarge(exceptions.APIException):
    """The request body is larger than the configured limit."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."


def declared_length(request) -> int:
    """Return the request's Content-Length (0 when absent or unreadable)."""
    meta = getattr(request, "META", {})
    try:
        return max(0, int(meta.get("CONTENT_LENGTH") or 0))
    except (TypeError, ValueError):
        return 0


class JSONParser(parsers.JSONParser):
    """Parse a JSON body of at most ``DATA_UPLOAD_MAX_MEMORY_SIZE`` bytes.

    DRF reads the body as a stream, which bypasses Django's own size check, so the limit is
    enforced here: a declared Content-Length over it is refused before anything is read, and
    the stream is never read past it. Nesting too deep for the parser (``RecursionError``)
    is malformed JSON like any other parse failure, not a crash.
    """

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is not None and declared_length(parser_context.get("request")) > limit:
            raise RequestTooLarge()
        raw = stream.read(limit + 1) if limit is not None else stream.read()
        if limit is not None and len(raw) > limit:
            raise RequestTooLarge()
        encoding = parsers.get_encoding(parser_context)
        try:
            text = raw.decode(encoding)
            return json.loads(text, parse_constant=_refuse_constant if self.strict else None)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply.") from None
        except ValueError as exc:  # includes UnicodeDecodeError and JSONDecodeError
            raise ParseError(f"JSON parse error - {exc}") from None


def _refuse_constant(name: str) -> None:
    # NaN and Infinity are not JSON (DRF's STRICT_JSON, on by default).
    raise ValueError(f"{name} is not valid JSON")
