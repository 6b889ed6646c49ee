"""The everyday shortcut of content negotiation chooses what DRF's negotiation chooses."""

from __future__ import annotations

import pytest
from drf_spectacular.renderers import OpenApiJsonRenderer, OpenApiYamlRenderer
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from config.negotiation import FirstRendererNegotiation

RENDERER_LISTS = [
    [JSONRenderer()],
    [JSONRenderer(), BrowsableAPIRenderer()],
    [OpenApiYamlRenderer(), OpenApiJsonRenderer()],
]
ACCEPTS = [
    None,
    "*/*",
    "application/json",
    "application/vnd.oai.openapi",
    "application/json; indent=4",
    "text/html",
    "",
    "application/*",
    "text/html, */*;q=0.1",
]


def choice(negotiation, renderers, accept, query="", suffix=None):
    headers = {} if accept is None else {"HTTP_ACCEPT": accept}
    request = Request(APIRequestFactory().get(f"/api/v1/selections/{query}", **headers))
    try:
        renderer, media_type = negotiation.select_renderer(request, renderers, suffix)
    except Exception as exc:  # the failure itself is compared
        return type(exc)
    return type(renderer), media_type


@pytest.mark.parametrize("renderers", RENDERER_LISTS, ids=lambda r: type(r[0]).__name__)
@pytest.mark.parametrize("accept", ACCEPTS)
@pytest.mark.parametrize(("query", "suffix"), [("", None), ("?format=json", None), ("", "json")])
def test_same_choice_as_drf(renderers, accept, query, suffix):
    ours = choice(FirstRendererNegotiation(), renderers, accept, query, suffix)
    assert ours == choice(DefaultContentNegotiation(), renderers, accept, query, suffix)


def test_is_the_api_default(settings):
    from rest_framework.settings import api_settings

    assert api_settings.DEFAULT_CONTENT_NEGOTIATION_CLASS is FirstRendererNegotiation
