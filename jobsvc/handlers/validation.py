"""The API's check of a create request's ``handler`` and ``handler_params``.

Messages are written for the API's caller; each error's ``field`` names the request field
(``handler`` or ``handler_params``) it concerns.
"""

from __future__ import annotations

from typing import Any

from jobsvc.handlers.errors import InvalidHandlerParams, UnknownHandler
from jobsvc.handlers.registry import DEFAULT_HANDLER, HandlerRegistry


def validate_handler(
    *, name: str | None, params: Any, registry: HandlerRegistry, user_id: int | None = None
) -> tuple[str, dict[str, Any]]:
    """Return (handler name, parameters to store); no handler named means the default.

    With ``user_id`` (the job's owner) the handler also checks what only that owner may
    ask for (the kafka handler: the topics granted to it).
    """
    name = DEFAULT_HANDLER if name is None else name
    if not isinstance(name, str):
        raise UnknownHandler(f"Must be a string, one of: {', '.join(registry.names())}.")
    params = {} if params is None else params
    if not isinstance(params, dict):
        raise InvalidHandlerParams("Must be a JSON object.")
    stored = registry.validate_params(name, params)
    if user_id is not None:
        registry.check_owner(name, stored, user_id=user_id)
    return name, stored
