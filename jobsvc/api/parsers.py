"""The request body parser: DRF's JSON parser, with every malformed body reported as 400."""

from __future__ import annotations

from rest_framework import parsers
from rest_framework.exceptions import ParseError


class JSONParser(parsers.JSONParser):
    """Like DRF's, but a body nested too deeply to decode is a parse error, not a crash.

    ``json`` raises RecursionError (not ValueError) for such a body, which DRF does not catch.
    """

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the body is nested too deeply.") from None
