"""Cursor pagination for the API's listings: strict about what the query string may say."""

from __future__ import annotations

import re

from rest_framework import pagination
from rest_framework.exceptions import NotFound, ValidationError

from config.filters import query_param

MAX_PAGE_SIZE = 1000
MAX_POSITION = 2**63 - 1  # ids are PostgreSQL bigints
_POSITION = re.compile(r"[0-9]{1,19}")


class IdCursorPagination(pagination.CursorPagination):
    """Page newest first by id: stable under concurrent inserts, no COUNT(*).

    ``page_size`` must be an integer 1..1000 (a 400 otherwise, never silently the default);
    a cursor that this server did not write is a 404, whatever it decodes to.
    """

    ordering = "-id"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE

    def get_page_size(self, request) -> int:
        raw = query_param(request, self.page_size_query_param)
        if raw is None:
            return self.page_size
        # ASCII digits only (no sign, space or other script), leading zeros allowed: the wire
        # form of an integer; the length is checked before converting.
        digits = raw.lstrip("0")
        if not (raw.isascii() and raw.isdigit() and len(digits) <= len(str(self.max_page_size))
                and 1 <= int(digits or 0) <= self.max_page_size):
            raise ValidationError({self.page_size_query_param: [
                f"Must be an integer from 1 to {self.max_page_size}."]})
        return int(digits)

    def decode_cursor(self, request):
        query_param(request, self.cursor_query_param)
        cursor = super().decode_cursor(request)
        # DRF checks offset and direction, but hands the position to the query as it is: in
        # a forged cursor it may be anything ("abc", "", "1.5"). Ours are always ids.
        if cursor is not None and cursor.position is not None and not (
                _POSITION.fullmatch(cursor.position) and int(cursor.position) <= MAX_POSITION):
            raise NotFound(self.invalid_cursor_message)
        return cursor

    def get_schema_operation_parameters(self, view) -> list[dict]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"] = {"type": "integer", "minimum": 1,
                                       "maximum": self.max_page_size, "default": self.page_size}
        return parameters
