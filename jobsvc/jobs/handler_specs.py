"""Which handler runs a job, and whether its parameters are acceptable, checked at create.

The API only validates here; the executor runs handlers (``jobsvc.handlers``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from jobsvc.handlers.errors import InvalidHandlerParams, UnknownHandler
from jobsvc.handlers.registry import DEFAULT_HANDLER
from jobsvc.handlers.resolution import resolution_budget
from jobsvc.handlers.setup import validation_registry
from jobsvc.handlers.validation import validate_handler as _validate

__all__ = ["DEFAULT_HANDLER", "HandlerSpecError", "request_resolution_budget", "validate_handler"]


class HandlerSpecError(ValueError):
    """The handler name or its parameters are not acceptable; ``field`` says which."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


def validate_handler(*, name: Any, params: Any, user_id: int | None = None) -> tuple[str, dict]:
    """Return (name, validated params); raise HandlerSpecError naming the bad field.

    ``user_id``: the job's owner, for the checks that depend on it (None: skip them).
    """
    try:
        return _validate(name=name, params=params, registry=validation_registry(), user_id=user_id)
    except (InvalidHandlerParams, UnknownHandler) as exc:
        raise HandlerSpecError(str(exc).strip("'\""), field=exc.field) from None


def request_resolution_budget():
    """The name-resolution budget of one request's handler checks (``resolution``)."""
    return resolution_budget(
        max_hosts=settings.HTTP_HANDLER_MAX_HOSTS_PER_REQUEST,
        max_seconds=settings.HTTP_HANDLER_RESOLVE_BUDGET_SECONDS,
    )
