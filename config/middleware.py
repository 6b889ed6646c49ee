"""Middleware of our own: 503 when a page loses the database; messages built only when used."""

from __future__ import annotations

from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.messages.storage import default_storage
from django.http import HttpResponse, JsonResponse
from django.utils.functional import SimpleLazyObject, empty

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


class LazyMessageMiddleware(MessageMiddleware):
    """Django's message middleware, building a request's message storage on first use.

    The stock middleware builds a cookie and a session storage (and a signer) for every
    request, although only admin pages use messages: on an API request that was a twentieth of
    the server time. A storage nobody touched has nothing to store.
    """

    def process_request(self, request) -> None:
        request._messages = SimpleLazyObject(lambda: default_storage(request))

    def process_response(self, request, response):
        messages = getattr(request, "_messages", None)
        if isinstance(messages, SimpleLazyObject) and messages._wrapped is empty:
            return response
        return super().process_response(request, response)
