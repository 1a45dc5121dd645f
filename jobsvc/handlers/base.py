"""What a handler is: the job it is given, and the protocol it implements.

A handler is an object with two methods:

- ``validate_params(params) -> dict``: called by the API when a job is created (and by the
  handler itself before each run); returns the parameters to store, or raises
  ``InvalidHandlerParams`` naming the bad parameter.
- ``handle(job: JobContext) -> None``: runs one attempt. Returning means success.
  Raising ``RetryableError`` means "try again later", ``PermanentError`` means "never
  retry"; any other exception counts as retryable (see ``errors``).

Optionally ``inline = True`` (a class attribute): the handler never blocks, so the
executor may call it on its own loop thread instead of handing it to the thread pool.

Delivery is at least once: an executor that dies after a handler's side effect but before
recording the outcome runs the same attempt again. Handlers pass ``job.idempotency_key``
to the systems they change so that those can drop the duplicate, and they must return (or
raise ``HandlerTimeout``) by ``job.deadline``: the executor does not kill a late handler.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from jobsvc.handlers.errors import (
    HandlerError,
    HandlerTimeout,
    InvalidHandlerParams,
    PermanentError,
    RetryableError,
)

__all__ = [
    "Handler",
    "HandlerError",
    "HandlerTimeout",
    "InvalidHandlerParams",
    "JobContext",
    "PermanentError",
    "RetryableError",
]


@dataclass(frozen=True)
class JobContext:
    """One attempt of one job, as a handler sees it."""

    job_id: str
    user_id: int
    shard_id: int
    attempt: int  # 1 for the first run
    message: str
    params: dict[str, Any] = field(default_factory=dict)  # as validate_params returned them
    # time.monotonic() value by which the attempt must end (its timeout_seconds from start).
    deadline: float = float("inf")

    @property
    def idempotency_key(self) -> str:
        """The same for every run of this attempt, different for every attempt."""
        return f"{self.job_id}:{self.attempt}"

    def remaining(self, *, clock: Callable[[], float] = time.monotonic) -> float:
        """Seconds left before the deadline; 0 once it has passed."""
        return max(0.0, self.deadline - clock())


@runtime_checkable
class Handler(Protocol):
    def validate_params(self, params: Any) -> dict[str, Any]: ...

    def handle(self, job: JobContext) -> None: ...
