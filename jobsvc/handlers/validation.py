"""The API's check of a create request's ``handler`` and ``handler_params``.

Messages are written for the API's caller; each error's ``field`` names the request field
(``handler`` or ``handler_params``) it concerns.
"""

from __future__ import annotations

from typing import Any

from jobsvc.handlers.errors import InvalidHandlerParams, UnknownHandler
from jobsvc.handlers.registry import DEFAULT_HANDLER, HandlerRegistry


def validate_handler(
    *, name: str | None, params: Any, registry: HandlerRegistry
) -> tuple[str, dict[str, Any]]:
    """Return (handler name, parameters to store); no handler named means the default."""
    name = DEFAULT_HANDLER if name is None else name
    if not isinstance(name, str):
        raise UnknownHandler(f"Must be a string, one of: {', '.join(registry.names())}.")
    params = {} if params is None else params
    if not isinstance(params, dict):
        raise InvalidHandlerParams("Must be a JSON object.")
    return name, registry.validate_params(name, params)
