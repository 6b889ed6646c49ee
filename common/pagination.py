"""Pagination of long lists: the API's cursor pages and the admin's counts of huge tables.

The API pages by cursor, strict about what the query string may say; the admin's paginator
never counts a huge table row by row.
"""

from __future__ import annotations

import json
import re

from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet
from django.utils.functional import cached_property
from rest_framework import pagination
from rest_framework.exceptions import NotFound, ValidationError

from common.filters import query_param
from common.sql import TABLE_ESTIMATE

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
        if not (
            raw.isascii()
            and raw.isdigit()
            and len(digits) <= len(str(self.max_page_size))
            and 1 <= int(digits or 0) <= self.max_page_size
        ):
            raise ValidationError(
                {
                    self.page_size_query_param: [
                        f"Must be an integer from 1 to {self.max_page_size}."
                    ]
                }
            )
        return int(digits)

    def decode_cursor(self, request):
        query_param(request, self.cursor_query_param)
        cursor = super().decode_cursor(request)
        # DRF checks offset and direction, but hands the position to the query as it is: in
        # a forged cursor it may be anything ("abc", "", "1.5"). Ours are always ids.
        if (
            cursor is not None
            and cursor.position is not None
            and not (_POSITION.fullmatch(cursor.position) and int(cursor.position) <= MAX_POSITION)
        ):
            raise NotFound(self.invalid_cursor_message)
        return cursor

    def get_schema_operation_parameters(self, view) -> list[dict]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"] = {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": self.max_page_size,
                    "default": self.page_size,
                }
        return parameters


# Below this many rows an exact COUNT(*) costs less than a millisecond or two: use it.
EXACT_BELOW = 10_000


def table_estimate(queryset) -> int:
    """Return the planner's row estimate for the queryset's table (-1 if never analysed)."""
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(TABLE_ESTIMATE, [queryset.model._meta.db_table])
        row = cursor.fetchone()
    return int(row[0]) if row else -1


def plan_estimate(queryset) -> int:
    """Return the planner's row estimate for the queryset, from EXPLAIN (nothing is executed)."""
    plan = json.loads(queryset.order_by().explain(format="json"))
    return int(plan[0]["Plan"]["Plan Rows"])


class EstimatedCountPaginator(Paginator):
    """Count exactly when cheap; otherwise take PostgreSQL's estimate.

    Unfiltered lists read ``pg_class.reltuples`` (kept fresh by autovacuum) instead of scanning
    the table. Filtered lists count at most ``EXACT_BELOW`` rows and, beyond that, fall back to
    the planner's estimate of the filtered query. ``estimated`` tells templates to say "about".
    """

    estimated = False

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return super().count
        if not queryset.query.where:
            estimate = table_estimate(queryset)
            if estimate >= EXACT_BELOW:
                self.estimated = True
                return estimate
            return queryset.count()
        # A count over a LIMIT subquery stops scanning once the cap is reached.
        capped = queryset.order_by()[: EXACT_BELOW + 1].count()
        if capped <= EXACT_BELOW:
            return capped
        self.estimated = True
        return max(plan_estimate(queryset), EXACT_BELOW)
