"""Handlers by name, built once at start-up from ``name -> dotted path`` (``JOB_HANDLERS``).

Each path names a class (or any factory) that the registry calls with the keyword
arguments given for that name in ``options``: the HTTP handler's secret and host
allow-list, the Kafka handler's topic allow-list and producer. The API process builds the
same registry only to validate parameters at create time, so a handler must be cheap to
construct and must not connect anywhere until its first ``handle()``.

A bad path or argument raises ``HandlerConfigError`` from the constructor, so a process
with a broken configuration stops at start-up instead of failing every job.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from jobsvc.handlers.base import Handler
from jobsvc.handlers.errors import HandlerConfigError, UnknownHandler

DEFAULT_HANDLER = "default"

BUILTIN_HANDLERS: Mapping[str, str] = {
    "default": "jobsvc.handlers.record.RecordHandler",
    "http": "jobsvc.handlers.http.HttpHandler",
    "kafka": "jobsvc.handlers.kafka.KafkaHandler",
}

MAX_NAME_LENGTH = 64  # characters; the length of Job.handler


class HandlerRegistry:
    def __init__(
        self,
        paths: Mapping[str, str],
        *,
        options: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        options = options or {}
        stray = sorted(set(options) - set(paths))
        if stray:
            raise HandlerConfigError(f"options given for unconfigured handlers: {stray}")
        self._handlers: dict[str, Handler] = {
            name: _build(name, path, options.get(name, {})) for name, path in paths.items()
        }

    def names(self) -> list[str]:
        return sorted(self._handlers)

    def __contains__(self, name: object) -> bool:
        return name in self._handlers

    def get(self, name: str) -> Handler:
        """The handler called ``name``; ``UnknownHandler`` if there is none."""
        try:
            return self._handlers[name]
        except (KeyError, TypeError):  # TypeError: an unhashable name from a JSON body
            raise UnknownHandler(
                f"Unknown handler {name!r}; one of: {', '.join(self.names())}."
            ) from None

    def validate_params(self, name: str, params: Any) -> dict[str, Any]:
        """The parameters to store for a job of handler ``name``, or InvalidHandlerParams."""
        return self.get(name).validate_params(params)

    def check_owner(self, name: str, params: dict[str, Any], *, user_id: int) -> None:
        """InvalidHandlerParams if this user may not run a job with these (validated)
        parameters; handlers without a ``check_owner`` method accept every user."""
        check = getattr(self.get(name), "check_owner", None)
        if check is not None:
            check(params, user_id=user_id)


def _build(name: object, path: object, kwargs: Mapping[str, Any]) -> Handler:
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_LENGTH:
        raise HandlerConfigError(
            f"handler name {name!r} must be a string of 1 to {MAX_NAME_LENGTH} characters"
        )
    if not isinstance(path, str) or "." not in path:
        raise HandlerConfigError(f"handler {name!r}: {path!r} is not a dotted path")
    module_path, _, attribute = path.rpartition(".")
    try:
        factory = getattr(importlib.import_module(module_path), attribute)
    except (ImportError, AttributeError) as exc:
        raise HandlerConfigError(f"handler {name!r}: cannot import {path}: {exc}") from exc
    try:
        handler = factory(**kwargs)
    except (HandlerConfigError, TypeError, ValueError) as exc:
        raise HandlerConfigError(f"handler {name!r} ({path}): {exc}") from exc
    if not isinstance(handler, Handler):
        raise HandlerConfigError(
            f"handler {name!r}: {path} has no validate_params(params) and handle(job)"
        )
    return handler
