"""What a handler is given: the attempt's identity, idempotency key and deadline."""

from __future__ import annotations

from jobsvc.handlers.base import JobContext


def make_job(*, attempt: int = 1, deadline: float = float("inf")) -> JobContext:
    return JobContext(
        job_id="j1", user_id=7, shard_id=0, attempt=attempt, message="m", deadline=deadline
    )


def test_the_idempotency_key_is_the_jobs_for_every_attempt():
    """A re-run after an executor died is the next attempt; its receiver must be able to
    drop the side effect the dead attempt may have had."""
    assert make_job(attempt=3).idempotency_key == "j1"
    assert make_job(attempt=4).idempotency_key == make_job(attempt=3).idempotency_key


def test_the_time_remaining_counts_down_to_zero_and_stays_there():
    job = make_job(deadline=100.0)

    assert job.remaining(clock=lambda: 97.5) == 2.5
    assert job.remaining(clock=lambda: 100.0) == 0.0
    assert job.remaining(clock=lambda: 130.0) == 0.0


def test_params_default_to_an_empty_object():
    assert make_job().params == {}
