"""The response renderer: DRF's JSON renderer, which never fails on an unpaired surrogate."""

from __future__ import annotations

from rest_framework import renderers


class JSONRenderer(renderers.JSONRenderer):
    """UTF-8 JSON as DRF renders it; a string holding an unpaired surrogate (a value read
    back from somewhere else, or echoed in an error) is written as a ``\\u`` escape
    instead of failing the response with a 500.

    DRF renders with ``ensure_ascii=False`` and then encodes as strict UTF-8, which
    refuses surrogates. The fallback renders that one response as ASCII JSON, whose
    escapes carry any code point; every other response costs nothing more.
    """

    def render(self, data, accepted_media_type=None, renderer_context=None):
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except UnicodeEncodeError:
            ascii_renderer = type(self)()
            ascii_renderer.ensure_ascii = True
            return ascii_renderer.render(data, accepted_media_type, renderer_context)
