"""Errors of job handlers: what a handler raises decides what happens to the job.

HandlerError
├── RetryableError          try this job again later, after a backoff
│   └── HandlerTimeout      the attempt ran out of time
├── PermanentError          never retry; the job fails (and goes to the dead-letter topic)
│   └── InvalidHandlerParams    the job's handler_params are not acceptable (a ValueError)
├── UnknownHandler          no handler of that name is configured (a LookupError)
├── HandlerConfigError      the handlers are misconfigured in this process
└── NotStarted              the handler could not begin: nothing happened, no attempt spent

Any exception that is not a ``HandlerError`` counts as retryable: a handler's bug or an
unexpected library error should not lose a job whose next attempt may well succeed, and
``max_attempts`` bounds the cost. ``UnknownHandler`` and ``HandlerConfigError`` raised
while running a job are retryable for the same reason: during a rolling deploy one
executor may not know a handler yet that another already runs.

``NotStarted`` is the executor's trouble, not the job's: what the handler reads before
it does anything (the owner's signing secrets, its topic grants) is out of reach for now.
The job is due again after a backoff with its attempt count unchanged, and the attempt
leaves no history: the user's ``max_attempts`` is for the job's own failures.

``InvalidHandlerParams`` and ``UnknownHandler`` carry the request ``field`` they concern
(``handler_params`` or ``handler``), so the API can report them per field.
``RetryableError`` and ``PermanentError`` may carry the ``HandlerResult`` of the call
that failed (``result``), which the attempt's history keeps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobsvc.handlers.base import HandlerResult


class HandlerError(Exception):
    """Root of the errors handlers and the handler registry raise."""

    result: HandlerResult | None = None  # what the called system answered, if anything


class RetryableError(HandlerError):
    """The attempt failed but a later one may succeed.

    ``retry_after`` (seconds), when the other side said how long to wait (HTTP
    ``Retry-After``), is a lower bound the executor may apply to its backoff.
    """

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        result: HandlerResult | None = None,
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.result = result


class HandlerTimeout(RetryableError):
    """The attempt did not finish before its deadline."""


class PermanentError(HandlerError):
    """The job can never succeed as it stands; retrying would only repeat the failure."""

    def __init__(self, message: str, *, result: HandlerResult | None = None) -> None:
        super().__init__(message)
        self.result = result


class InvalidHandlerParams(PermanentError, ValueError):
    """The handler parameters are not acceptable; the message names the parameter."""

    def __init__(self, message: str, *, field: str = "handler_params") -> None:
        super().__init__(message)
        self.field = field


class UnknownHandler(HandlerError, LookupError):
    """No handler of that name is configured."""

    def __init__(self, message: str, *, field: str = "handler") -> None:
        super().__init__(message)
        self.field = field


class HandlerConfigError(HandlerError):
    """The handler configuration of this process is unusable (a bad path or argument)."""


class NotStarted(HandlerError):
    """The handler could not begin, and did nothing: the attempt does not count."""
