"""What a handler is: the job it is given, and the protocol it implements.

A handler is an object with two methods:

- ``validate_params(params) -> dict``: called by the API when a job is created (and by the
  handler itself before each run); returns the parameters to store, or raises
  ``InvalidHandlerParams`` naming the bad parameter.
- ``handle(job: JobContext) -> HandlerResult | None``: runs one attempt. Returning means
  success. Raising ``RetryableError`` means "try again later", ``PermanentError`` means
  "never retry"; any other exception counts as retryable (see ``errors``). A handler that
  calls another system may say what it answered, for the attempt's history: it returns a
  ``HandlerResult``, or raises an error that carries one (``result=``).

Optionally ``check_owner(params, *, user_id) -> None``: called by the API after
``validate_params`` with the job's owner, to refuse (``InvalidHandlerParams``) what only
some users may ask for; a handler that has it calls it itself before each run too.

Optionally ``inline = True`` (a class attribute): the handler never blocks, so the
executor may call it on its own loop thread instead of handing it to the thread pool.

Delivery is at least once. The same attempt can run twice (a duplicate message claimed
before the first outcome was recorded is dropped, but the side effect of an attempt whose
answer was lost happened anyway), and an executor that dies after a handler's side effect
but before recording the outcome makes the scheduler run the job again as the next
attempt (the attempt that died counts: a job that keeps killing its executor ends).
So the idempotency key is per job, not per attempt: ``job.idempotency_key`` is the same
for every attempt and every run of the job, and handlers pass it to the systems they
change so that those apply the job's side effect once and drop every later delivery with
the key. ``job.attempt`` says which attempt this is. Handlers must return (or raise
``HandlerTimeout``) by ``job.deadline``: the executor does not kill a late handler.
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
    "HandlerResult",
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
        """The same for every attempt and every run of this job: the job's id.

        A receiver that applied the job's side effect drops later deliveries with this key,
        whether a duplicate of one attempt, a retry after an answer that was lost, or the
        next attempt after an executor died before recording the outcome.
        """
        return self.job_id

    def remaining(self, *, clock: Callable[[], float] = time.monotonic) -> float:
        """Seconds left before the deadline; 0 once it has passed."""
        return max(0.0, self.deadline - clock())


@dataclass(frozen=True)
class HandlerResult:
    """What the system a handler called answered, kept in the attempt's history.

    The executor keeps at most JOBSVC_ATTEMPT_RESPONSE_EXCERPT_BYTES of the excerpt.
    """

    http_status: int | None = None
    response_excerpt: str | None = None  # the first bytes of the answer's body, as text


@runtime_checkable
class Handler(Protocol):
    def validate_params(self, params: Any) -> dict[str, Any]: ...

    def handle(self, job: JobContext) -> HandlerResult | None: ...
