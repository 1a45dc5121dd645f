"""Running one attempt through its handler and turning what happened into an Outcome."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from executor_worker.claims import Attempt, Outcome
from executor_worker.metrics import ATTEMPT_DURATION
from executor_worker.retry_policy import RetryPolicy
from jobsvc.handlers.base import JobContext
from jobsvc.handlers.errors import (
    PermanentError,
    RetryableError,
    UnknownHandler,
)
from jobsvc.handlers.registry import HandlerRegistry

logger = logging.getLogger(__name__)

_MAX_ERROR_LENGTH = 2000  # characters of an error message kept per attempt


class AttemptRunner:
    def __init__(
        self,
        *,
        registry: HandlerRegistry,
        retry_base_delay: float,
        retry_max_delay: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.retry_base_delay = retry_base_delay
        self.retry_max_delay = retry_max_delay
        self.clock = clock

    def inline_handlers(self) -> list[str]:
        """The names of the handlers that never block (``inline = True``)."""
        return [
            name
            for name in self.registry.names()
            if getattr(self.registry.get(name), "inline", False)
        ]

    def runs_inline(self, attempt: Attempt) -> bool:
        """Handlers that never block (``inline = True``) skip the thread pool's overhead."""
        try:
            return bool(getattr(self.registry.get(attempt.handler), "inline", False))
        except UnknownHandler:
            return True  # fails at once in run()

    def context(self, attempt: Attempt, *, started: float) -> JobContext:
        return JobContext(
            job_id=attempt.job_id,
            user_id=attempt.user_id,
            shard_id=attempt.shard_id,
            attempt=attempt.attempt,
            message=attempt.message,
            params=attempt.handler_params,
            deadline=started + attempt.timeout_seconds,
        )

    def run(self, attempt: Attempt, *, started: float) -> Outcome:
        """Run the attempt's handler; never raises."""
        # A success that comes after the deadline still counts: its side effect happened,
        # and running the job again would repeat it. (If the worker already recorded the
        # attempt as timed out, this late outcome is ignored there.)
        began = self.clock()
        try:
            handler = self.registry.get(attempt.handler)
            handler.handle(self.context(attempt, started=started))
        except Exception as exc:
            return self.failed(attempt, exc)
        finally:
            ATTEMPT_DURATION.labels(attempt.handler).observe(self.clock() - began)
        return Outcome(attempt=attempt, succeeded=True)

    def failed(self, attempt: Attempt, error: BaseException) -> Outcome:
        """The outcome of a failed attempt: a retry after a backoff, or the end."""
        text = f"{type(error).__name__}: {error}"[:_MAX_ERROR_LENGTH]
        policy = RetryPolicy(
            max_attempts=attempt.max_attempts,
            base_delay=self.retry_base_delay,
            max_delay=self.retry_max_delay,
        )
        if not policy.should_retry(attempt.attempt, error):
            level = logging.INFO if isinstance(error, PermanentError) else logging.WARNING
            logger.log(
                level,
                "job %s failed for good on attempt %d: %s",
                attempt.job_id,
                attempt.attempt,
                text,
                extra={"job_id": attempt.job_id, "action": "fail"},
            )
            return Outcome(attempt=attempt, succeeded=False, error=text, retry_delay=None)
        delay = policy.next_delay(attempt.attempt)
        retry_after = getattr(error, "retry_after", None)
        if isinstance(error, RetryableError) and retry_after is not None:
            delay = min(max(delay, retry_after), self.retry_max_delay)
        return Outcome(attempt=attempt, succeeded=False, error=text, retry_delay=delay)
