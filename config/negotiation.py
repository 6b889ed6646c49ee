"""Content negotiation that answers the everyday request without parsing its Accept header.

DRF parses and ranks the Accept header of every request (about a twentieth of a selection's
server time). When the request names no format and accepts anything, or exactly the view's
first renderer, DRF's answer is that renderer and its media type; this says so at once and
leaves every other request to DRF. tests/integration/api/test_negotiation.py holds the two equal.
"""

from __future__ import annotations

from rest_framework.negotiation import DefaultContentNegotiation


class FirstRendererNegotiation(DefaultContentNegotiation):
    def select_renderer(self, request, renderers, format_suffix=None):
        meta = request.META
        override = self.settings.URL_FORMAT_OVERRIDE
        if (
            renderers
            and not format_suffix
            and (not override or override not in meta.get("QUERY_STRING", ""))
            and meta.get("HTTP_ACCEPT", "*/*") in ("*/*", renderers[0].media_type)
        ):
            return renderers[0], renderers[0].media_type
        return super().select_renderer(request, renderers, format_suffix)
