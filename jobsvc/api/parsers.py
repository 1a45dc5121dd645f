"""The request body parser: DRF's JSON parser, with every malformed body reported as 400.

JSON can carry two things no field of this service may hold: the NUL character (which
PostgreSQL's text and jsonb cannot store) and an unpaired surrogate (``"\\ud800"``, which
is not Unicode and which no UTF-8 encoder, the response renderer's included, accepts).
Either one, anywhere in the body (a value or an object key, at any depth), makes the
body a 400 naming where it is, before any view reads it. Both can only arrive as a
``\\u`` escape, so a body without one is not walked at all. A number too large for a
float (``1e400``) is refused too, rather than read as infinity.
"""

from __future__ import annotations

import math
import re
from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.utils import json

# \u0000 or a \uD800-\uDFFF escape: the only ways JSON text can spell NUL or a surrogate.
# It also matches inside an escaped backslash ("\\u0000", a harmless text); the walk
# below then finds nothing.
_MAYBE_UNSTORABLE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")

NUL_MESSAGE = "Must not contain NUL (\\u0000) characters."
SURROGATE_MESSAGE = "Must be valid Unicode (no unpaired surrogates)."


class JSONParser(parsers.JSONParser):
    """Like DRF's, but a body nested too deeply to decode is a parse error, not a crash,
    and a NUL or an unpaired surrogate anywhere in it is a validation error.

    ``json`` raises RecursionError (not ValueError) for a body nested too deeply, which
    DRF does not catch.
    """

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = parsers.get_encoding(parser_context or {})
        try:
            text = stream.read().decode(encoding)
            # DRF's wrapper refuses NaN and Infinity; _finite_float, 1e400 (read as inf).
            data = json.loads(text, parse_float=_finite_float)
        except ValueError as exc:  # UnicodeDecodeError too
            raise ParseError(f"JSON parse error - {exc}") from None
        except RecursionError:
            raise ParseError("JSON parse error - the body is nested too deeply.") from None
        if _MAYBE_UNSTORABLE.search(text):
            problem = unstorable_text(data)
            if problem is not None:
                path, message = problem
                raise ValidationError(_detail(path, message))
        return data


def _finite_float(literal: str) -> float:
    number = float(literal)
    if math.isinf(number):
        raise ValueError(f"the number {literal[:20]} is out of range")
    return number


Path = tuple[str | int, ...]  # object keys (printable) and list indices


def unstorable_text(value: Any, path: Path = ()) -> tuple[Path, str] | None:
    """The path and the problem of the first string (value or key) holding a NUL or an
    unpaired surrogate in ``value``, or None. Keys in the path are printable (escaped)."""
    if isinstance(value, str):
        problem = text_problem(value)
        return None if problem is None else (path, problem)
    if isinstance(value, dict):
        for key, item in value.items():
            where = (*path, printable(key))
            problem = text_problem(key)
            if problem is not None:
                return where, f"A field name: {problem[0].lower()}{problem[1:]}"
            found = unstorable_text(item, where)
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = unstorable_text(item, (*path, index))
            if found is not None:
                return found
    return None


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored or sent back, or None."""
    if "\x00" in text:
        return NUL_MESSAGE
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return SURROGATE_MESSAGE
    return None


def printable(text: str) -> str:
    """``text`` with unpaired surrogates and NUL written as escapes, safe to echo back."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\u0000")


def _detail(path: Path, message: str) -> Any:
    """The error as the views report theirs: by field, and by index in a bulk list."""
    detail: Any = [message]
    for part in reversed(path):
        if isinstance(part, int):
            item = detail if isinstance(detail, dict) else {"non_field_errors": detail}
            detail = [{} for _ in range(part)] + [item]
        else:
            detail = {part: detail}
    return detail
