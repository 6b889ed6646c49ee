"""Our middleware: API-key calls skip browser layers; 503 on a lost database; lazy messages."""

from __future__ import annotations

from django.conf import settings
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.messages.storage import default_storage
from django.core.handlers.base import BaseHandler
from django.http import HttpResponse, JsonResponse
from django.utils.functional import SimpleLazyObject, empty
from rest_framework_api_key.permissions import KeyParser

from common.errors import error_body
from config.exceptions import ERRORS, DatabaseBusy, ServiceUnavailable
from config.outage import (
    BUSY_RETRY_AFTER,
    UNAVAILABLE_RETRY_AFTER,
    is_connection_loss,
    is_overload,
    note_connection_loss,
    note_overload,
)


def unavailable_page(request, busy: bool = False) -> HttpResponse:
    """Return the 503 for ``request``: the API's JSON shape under /api/, plain text elsewhere.

    ``busy``: the database gave up on a statement (database_busy), rather than being lost.
    """
    cls = DatabaseBusy if busy else ServiceUnavailable
    error = ERRORS[cls]
    response: HttpResponse
    if request.path.startswith("/api/"):
        response = JsonResponse(
            error_body(error.code, str(cls.default_detail)), status=error.status
        )
    else:
        state = "busy" if busy else "unavailable"
        response = HttpResponse(
            f"The database is {state}; try again shortly.\n",
            status=error.status,
            content_type="text/plain; charset=utf-8",
        )
    response["Retry-After"] = BUSY_RETRY_AFTER if busy else UNAVAILABLE_RETRY_AFTER
    # Read by django.utils.log.log_response, which django-stubs does not declare.
    response._has_been_logged = True  # type: ignore[attr-defined]  # logged once already
    return response


# The API's requests that ApiKeyRequests may send down the short chain.
API_PREFIX = "/api/v1/"
_key_parser = KeyParser()


def carries_api_key(request) -> bool:
    """Tell whether ``request`` is an API call that names an API key.

    The same parser as ``clients.authentication.ApiKeyAuthentication``: such a request is
    authenticated by its key or refused, never by a session.
    """
    return request.path_info.startswith(API_PREFIX) and _key_parser.get(request) is not None


class ApiKeyRequests:
    """First in ``MIDDLEWARE``: API-key calls run ``API_KEY_MIDDLEWARE`` instead of the rest.

    A backend calling the API with its key has no use for what serves browsers: static files,
    sessions, CSRF cookies, ``request.user`` from a session, messages, frame options. Their
    layers took about a twentieth of a selection cycle's server CPU. Everything else (the admin,
    staff sessions reading the API, the docs, probes) goes through the whole ``MIDDLEWARE``.
    The short chain ends in a handler of its own, so its view and exception hooks are its own
    middleware's (Django keeps them per handler).
    """

    def __init__(self, get_response) -> None:
        self.get_response = get_response
        self.api_key_chain = ApiKeyHandler().chain

    def __call__(self, request):
        if carries_api_key(request):
            return self.api_key_chain(request)
        return self.get_response(request)


class ApiKeyHandler(BaseHandler):
    """Django's request handling with ``API_KEY_MIDDLEWARE`` as its middleware."""

    def load_middleware(self, is_async: bool = False) -> None:
        # Django builds a chain from settings.MIDDLEWARE only: give it the short list while it
        # builds this one (once per process, at start-up, before any request).
        whole = settings.MIDDLEWARE
        settings.MIDDLEWARE = settings.API_KEY_MIDDLEWARE
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = whole

    @property
    def chain(self):
        """Return the request → response callable of this handler's middleware and views."""
        if self._middleware_chain is None:
            self.load_middleware()
        return self._middleware_chain


class DatabaseUnavailableMiddleware:
    """Turn a lost or busy database in a view (admin, dashboard, metrics) into a 503.

    API views answer through the DRF exception handler; this covers Django's own views.
    """

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception: Exception) -> HttpResponse | None:
        if is_overload(exception):
            note_overload(request, exception)
            return unavailable_page(request, busy=True)
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
