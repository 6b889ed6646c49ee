"""Answer 503 (not 500 with a traceback) when a page outside the API loses the database."""

from __future__ import annotations

from django.http import HttpResponse, JsonResponse

from common.errors import error_body
from config.exceptions import ERRORS, ServiceUnavailable
from config.outage import UNAVAILABLE_RETRY_AFTER, is_connection_loss, note_connection_loss


def unavailable_page(request) -> HttpResponse:
    """Return the 503 for ``request``: the API's JSON shape under /api/, plain text elsewhere."""
    error = ERRORS[ServiceUnavailable]
    response: HttpResponse
    if request.path.startswith("/api/"):
        response = JsonResponse(
            error_body(error.code, str(ServiceUnavailable.default_detail)), status=error.status
        )
    else:
        response = HttpResponse(
            "The database is unavailable; try again shortly.\n",
            status=error.status,
            content_type="text/plain; charset=utf-8",
        )
    response["Retry-After"] = UNAVAILABLE_RETRY_AFTER
    # Read by django.utils.log.log_response, which django-stubs does not declare.
    response._has_been_logged = True  # type: ignore[attr-defined]  # logged once already
    return response


class DatabaseUnavailableMiddleware:
    """Turn a lost database connection in a view (admin, dashboard, metrics) into a 503.

    API views answer through the DRF exception handler; this covers Django's own views.
    """

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception: Exception) -> HttpResponse | None:
        if not is_connection_loss(exception):
            return None
        note_connection_loss(request, exception)
        return unavailable_page(request)
