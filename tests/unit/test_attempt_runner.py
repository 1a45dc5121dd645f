"""AttemptRunner: what a handler reports becomes the outcome the attempt's history keeps."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest

from executor_worker.claims import Attempt
from executor_worker.runner import AttemptRunner
from jobsvc.handlers.base import HandlerResult, JobContext
from jobsvc.handlers.errors import HandlerTimeout, NotStarted, PermanentError, RetryableError
from jobsvc.handlers.registry import HandlerRegistry

T0 = datetime(2030, 1, 1, tzinfo=UTC)


class Scripted:
    """Does what the job's message names (class attribute ``outcomes``: message -> what)."""

    outcomes: ClassVar[dict[str, Any]] = {}

    def validate_params(self, params: Any) -> dict[str, Any]:
        return {}

    def handle(self, job: JobContext) -> HandlerResult | None:
        outcome = self.outcomes[job.message]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


@pytest.fixture
def runner() -> AttemptRunner:
    registry = HandlerRegistry({"scripted": f"{__name__}.Scripted"})
    return AttemptRunner(
        registry=registry, retry_base_delay=1.0, retry_max_delay=60.0, response_excerpt_bytes=8
    )


def attempt(message: str, *, number: int = 1, max_attempts: int = 3) -> Attempt:
    return Attempt(
        job_id="2bH5Yk3sQeM1pZ0x9LwVnR4tUa7",
        user_id=7,
        shard_id=0,
        attempt=number,
        max_attempts=max_attempts,
        timeout_seconds=10.0,
        handler="scripted",
        handler_params={},
        message=message,
        execute_at=T0,
        due_at=T0,
        created_at=T0,
        attempt_errors=[],
    )


def run(runner: AttemptRunner, message: str, outcome: Any, **kwargs: Any):
    Scripted.outcomes = {message: outcome}
    return runner.run(attempt(message, **kwargs), started=0.0)


def test_a_success_keeps_what_the_handler_reported(runner):
    outcome = run(runner, "ok", HandlerResult(200, "accepted"))

    assert (outcome.succeeded, outcome.http_status, outcome.response_excerpt) == (
        True,
        200,
        "accepted",
    )
    assert outcome.history_outcome == "succeeded"


def test_a_success_that_reports_nothing_has_no_status(runner):
    outcome = run(runner, "quiet", None)

    assert (outcome.http_status, outcome.response_excerpt) == (None, None)


def test_a_failure_keeps_what_its_error_carries(runner):
    error = RetryableError("503 busy", result=HandlerResult(503, "busy"))

    outcome = run(runner, "busy", error)

    assert (outcome.http_status, outcome.response_excerpt) == (503, "busy")
    assert outcome.history_outcome == "retried"
    final = run(runner, "gone", PermanentError("404", result=HandlerResult(404, "no")))
    assert (final.history_outcome, final.http_status) == ("failed", 404)


def test_a_timeout_is_its_own_outcome_retried_or_not(runner):
    retried = run(runner, "slow", HandlerTimeout("no answer in time"))
    last = run(runner, "slow", HandlerTimeout("no answer in time"), number=3)

    assert (retried.history_outcome, retried.retry_delay is not None) == ("timed_out", True)
    assert (last.history_outcome, last.retry_delay) == ("timed_out", None)
    assert runner.failed(attempt("x"), HandlerTimeout("attempt timed out")).timed_out


def test_the_excerpt_is_bounded_in_utf8_bytes_without_cutting_a_character(runner):
    outcome = run(runner, "long", HandlerResult(200, "abcdefgé and more"))  # é: bytes 8-9

    assert outcome.response_excerpt == "abcdefg"


@pytest.mark.parametrize("status", [True, 42, 1000, "200", 200.0])
def test_a_status_that_is_no_http_status_is_left_out(runner, status):
    assert run(runner, "odd", HandlerResult(status, None)).http_status is None  # type: ignore[arg-type]


def test_nul_characters_never_reach_the_database(runner):
    outcome = run(runner, "nul", RetryableError("bad\x00byte", result=HandlerResult(500, "a\x00b")))

    assert "\x00" not in outcome.error
    assert outcome.response_excerpt == "a\ufffdb"


def test_a_handler_that_could_not_begin_spends_no_attempt_even_the_last(runner):
    outcome = run(runner, "secrets", NotStarted("control database unreachable"), number=3)

    assert not outcome.started
    assert 2.0 <= outcome.retry_delay <= 4.0  # the backoff attempt 3 would have had
    assert outcome.error == ""  # nothing for the attempt's history
