"""Running one attempt through its handler and turning what happened into an Outcome."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from executor_worker.claims import Attempt, Outcome
from executor_worker.metrics import ATTEMPT_DURATION
from executor_worker.retry_policy import RetryPolicy
from jobsvc.handlers.base import HandlerResult, JobContext
from jobsvc.handlers.errors import HandlerTimeout, NotStarted, PermanentError, RetryableError
from jobsvc.handlers.registry import HandlerRegistry

logger = logging.getLogger(__name__)

_MAX_ERROR_LENGTH = 2000  # characters of an error message kept per attempt
DEFAULT_RESPONSE_EXCERPT_BYTES = 1024  # of a handler's response excerpt, kept per attempt


class AttemptRunner:
    def __init__(
        self,
        *,
        registry: HandlerRegistry,
        retry_base_delay: float,
        retry_max_delay: float,
        response_excerpt_bytes: int = DEFAULT_RESPONSE_EXCERPT_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.retry_base_delay = retry_base_delay
        self.retry_max_delay = retry_max_delay
        self.response_excerpt_bytes = response_excerpt_bytes  # UTF-8 bytes kept per attempt
        self.clock = clock

    def inline_handlers(self) -> list[str]:
        """The names of the handlers that never block (``inline = True``)."""
        return [
            name
            for name in self.registry.names()
            if getattr(self.registry.get(name), "inline", False)
        ]

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
            result = handler.handle(self.context(attempt, started=started))
        except NotStarted as exc:
            return self.not_started(attempt, exc)
        except Exception as exc:
            return self.failed(attempt, exc)
        finally:
            ATTEMPT_DURATION.labels(attempt.handler).observe(self.clock() - began)
        return Outcome(attempt=attempt, succeeded=True, **self._reported(result))

    def not_started(self, attempt: Attempt, error: NotStarted) -> Outcome:
        """The handler did nothing: the job is due again after the backoff its attempt
        would have had, with the attempt not counted (``jobsvc.handlers.errors``)."""
        delay = self._policy(attempt).next_delay(attempt.attempt)
        logger.warning(
            "job %s: attempt %d did not start, due again in %.1f s: %s",
            attempt.job_id,
            attempt.attempt,
            delay,
            error,
            extra={"job_id": attempt.job_id, "action": "not_started"},
        )
        return Outcome(attempt=attempt, succeeded=False, retry_delay=delay, started=False)

    def failed(self, attempt: Attempt, error: BaseException) -> Outcome:
        """The outcome of a failed attempt: a retry after a backoff, or the end."""
        text = _storable(f"{type(error).__name__}: {error}"[:_MAX_ERROR_LENGTH])
        reported = {
            "timed_out": isinstance(error, HandlerTimeout),
            **self._reported(getattr(error, "result", None)),
        }
        policy = self._policy(attempt)
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
            return Outcome(attempt=attempt, succeeded=False, error=text, **reported)
        delay = policy.next_delay(attempt.attempt)
        retry_after = getattr(error, "retry_after", None)
        if isinstance(error, RetryableError) and retry_after is not None:
            delay = min(max(delay, retry_after), self.retry_max_delay)
        return Outcome(attempt=attempt, succeeded=False, error=text, retry_delay=delay, **reported)

    def _policy(self, attempt: Attempt) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=attempt.max_attempts,
            base_delay=self.retry_base_delay,
            max_delay=self.retry_max_delay,
        )

    def _reported(self, result: object) -> dict[str, object]:
        """What a handler's ``HandlerResult`` said, as the attempt's history keeps it: a
        plausible HTTP status, and at most ``response_excerpt_bytes`` of the excerpt."""
        if not isinstance(result, HandlerResult):
            return {}
        status = result.http_status
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 999:
            status = None
        excerpt = result.response_excerpt
        if isinstance(excerpt, str) and excerpt and self.response_excerpt_bytes > 0:
            cut = excerpt.encode("utf-8", "replace")[: self.response_excerpt_bytes]
            excerpt = _storable(cut.decode("utf-8", "ignore"))
        else:
            excerpt = None
        return {"http_status": status, "response_excerpt": excerpt}


def _storable(text: str) -> str:
    """Text PostgreSQL can store: it refuses NUL characters in text and jsonb."""
    return text.replace("\x00", "\ufffd")
