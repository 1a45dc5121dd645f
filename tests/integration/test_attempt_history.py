"""The attempt history (``jobs_attempt``) as the executor and the sweeper write it.

Every finished attempt gets one row, written in the transaction that records its outcome,
but an inline success: the job's row is its record, and the owner's listing reads it there;
an outcome that changes nothing (a duplicate, a stale attempt, one the sweeper gave up)
writes nothing, and the purge deletes a job's rows with it. Executor tests run in one
transaction, so ``now()`` is one instant: times are compared exactly.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from executor_worker.claims import Attempt, ClaimRequest, ClaimStore, Outcome
from jobsvc.jobs import store
from jobsvc.jobs.models import Job, JobAttempt
from jobsvc.jobs.selectors import job_attempts
from jobsvc.jobs.specs import JobSpec
from jobsvc.sharding.ids import new_job_id
from jobsvc.sharding.shards import shard_alias
from scheduler_worker import queries as scheduler_queries
from scheduler_worker.shard_store import ShardStore

pytestmark = pytest.mark.django_db(databases="__all__")

SHARD = 1
ALIAS = shard_alias(SHARD)
EXPIRED = timedelta(minutes=-1)


@pytest.fixture
def claims() -> ClaimStore:
    return ClaimStore(shard_id=SHARD, lease_seconds=5.0)


def _job(*, status: str = "queued", attempts: int = 0, max_attempts: int = 3, lease=None) -> str:
    now = timezone.now()
    spec = JobSpec(
        message="history",
        execute_at=now - timedelta(minutes=1),
        max_attempts=max_attempts,
        timeout_seconds=10.0,
    )
    job_id = new_job_id(shard_id=SHARD, at=now)
    row = store.new_job_row(job_id=job_id, user_id=7, spec=spec, shard_id=SHARD, now=now)
    store.insert_jobs(ALIAS, [row])
    Job.objects.using(ALIAS).filter(pk=job_id).update(
        status=status,
        attempts=attempts,
        started_at=None if status != "running" else now - timedelta(seconds=30),
        lease_expires_at=None if lease is None else now + lease,
    )
    return job_id


def _req(job_id: str, attempt: int = 1) -> ClaimRequest:
    """What a message of the job asks: its user and due time as stored."""
    job = Job.objects.using(ALIAS).get(pk=job_id)
    return ClaimRequest(job_id=job_id, attempt=attempt, user_id=job.user_id, due_at=job.due_at)


def _claim(claims: ClaimStore, job_id: str, attempt: int = 1) -> Attempt:
    [claimed] = claims.claim([_req(job_id, attempt)])
    return claimed


def _history(job_id: str) -> list[JobAttempt]:
    return list(JobAttempt.objects.using(ALIAS).filter(job_id=job_id).order_by("attempt"))


def _rows(job_id: str) -> list[tuple]:
    return [
        (a.attempt, a.outcome, a.error, a.http_status, a.response_excerpt) for a in _history(job_id)
    ]


def _attempts(job_id: str, *, before_attempt: int | None = None) -> list:
    """The job's attempts as its owner reads them (GET .../attempts), newest first."""
    page = job_attempts(user_id=7, job_id=job_id, before_attempt=before_attempt, limit=10)
    return page.attempts


def _job_row(job_id: str) -> Job:
    return Job.objects.using(ALIAS).get(pk=job_id)


# --- the executor's outcomes ------------------------------------------------------------


def test_a_success_is_one_row_from_its_start_to_its_end(claims):
    job_id = _job()
    attempt = _claim(claims, job_id)

    claims.record(
        [Outcome(attempt=attempt, succeeded=True, http_status=204, response_excerpt="ok")]
    )

    [row] = _history(job_id)
    job = _job_row(job_id)
    assert (row.attempt, row.outcome, row.error, row.http_status, row.response_excerpt) == (
        1,
        "succeeded",
        "",
        204,
        "ok",
    )
    assert (row.started_at, row.finished_at) == (job.started_at, job.finished_at)


def test_failures_are_rows_that_say_how_the_attempt_ended(claims):
    retried, timed_out, failed, timed_out_last = (_job() for _ in range(4))
    attempts = {job_id: _claim(claims, job_id) for job_id in (retried, timed_out, failed)}
    last = _claim(claims, timed_out_last)

    claims.record(
        [
            Outcome(
                attempt=attempts[retried],
                succeeded=False,
                error="RetryableError: answered 503",
                retry_delay=1.0,
                http_status=503,
                response_excerpt="busy",
            ),
            Outcome(
                attempt=attempts[timed_out],
                succeeded=False,
                error="HandlerTimeout: attempt timed out",
                retry_delay=1.0,
                timed_out=True,
            ),
        ]
    )
    claims.fail(
        [
            Outcome(attempt=attempts[failed], succeeded=False, error="PermanentError: 404"),
            Outcome(attempt=last, succeeded=False, error="HandlerTimeout: late", timed_out=True),
        ]
    )

    assert _rows(retried) == [(1, "retried", "RetryableError: answered 503", 503, "busy")]
    assert _rows(timed_out) == [(1, "timed_out", "HandlerTimeout: attempt timed out", None, "")]
    assert _rows(failed) == [(1, "failed", "PermanentError: 404", None, "")]
    assert _rows(timed_out_last) == [(1, "timed_out", "HandlerTimeout: late", None, "")]


def test_each_attempt_of_a_retried_job_has_its_own_row(claims):
    job_id = _job()
    first = _claim(claims, job_id)
    claims.record([Outcome(attempt=first, succeeded=False, error="boom", retry_delay=0.0)])
    second = _claim(claims, job_id, attempt=2)
    claims.record([Outcome(attempt=second, succeeded=True)])

    assert [(row.attempt, row.outcome) for row in _history(job_id)] == [
        (1, "retried"),
        (2, "succeeded"),
    ]


def test_a_duplicate_or_stale_outcome_writes_no_second_row(claims):
    job_id = _job()
    first = _claim(claims, job_id)
    claims.record([Outcome(attempt=first, succeeded=False, error="boom", retry_delay=0.0)])
    second = _claim(claims, job_id, attempt=2)

    claims.record(
        [
            Outcome(attempt=first, succeeded=True),  # attempt 1 again: stale
            Outcome(attempt=first, succeeded=False, error="again", retry_delay=0.0),
        ]
    )
    claims.record([Outcome(attempt=second, succeeded=True)])
    claims.record([Outcome(attempt=second, succeeded=True)])  # a duplicate

    assert _rows(job_id) == [(1, "retried", "boom", None, ""), (2, "succeeded", "", None, "")]


@pytest.mark.parametrize("status", ["scheduled", "succeeded", "failed", "cancelled"])
def test_an_outcome_for_a_job_no_longer_running_writes_no_row(claims, status):
    job_id = _job()
    attempt = _claim(claims, job_id)
    # As another transaction would have changed it (an earlier updated_at than ours).
    Job.objects.using(ALIAS).filter(pk=job_id).update(
        status=status, updated_at=timezone.now() - timedelta(seconds=1)
    )

    claims.record(
        [
            Outcome(attempt=attempt, succeeded=True),
            Outcome(attempt=attempt, succeeded=False, error="x", retry_delay=1.0),
        ]
    )
    claims.fail([Outcome(attempt=attempt, succeeded=False, error="x")])

    assert _history(job_id) == []


def test_an_inline_success_is_listed_from_its_job_row_with_no_duration(claims):
    job_id = _job()

    [attempt] = claims.claim_succeeded([_req(job_id)], handlers=["default"])

    assert _history(job_id) == []  # no row: the job's row holds it
    [listed] = _attempts(job_id)
    assert (listed.attempt, listed.outcome) == (attempt.attempt, "succeeded")
    assert listed.started_at == listed.finished_at == _job_row(job_id).finished_at
    assert (listed.duration_seconds, listed.http_status) == (0.0, None)


def test_an_inline_success_after_failed_attempts_is_listed_before_them(claims):
    job_id = _job()
    claims.record([Outcome(attempt=_claim(claims, job_id), succeeded=False, retry_delay=0.0)])

    claims.claim_succeeded([_req(job_id, attempt=2)], handlers=["default"])

    assert [(a.attempt, a.outcome) for a in _attempts(job_id)] == [
        (2, "succeeded"),
        (1, "retried"),
    ]
    assert [(a.attempt, a.outcome) for a in _attempts(job_id, before_attempt=2)] == [(1, "retried")]


def test_a_reopened_inline_attempt_keeps_only_the_outcome_recorded_after(claims):
    job_id = _job()
    [attempt] = claims.claim_succeeded([_req(job_id)], handlers=["default"])

    claims.reopen([attempt])
    assert [(a.attempt, a.outcome) for a in _attempts(job_id)] == [(1, "running")]
    claims.record([Outcome(attempt=attempt, succeeded=False, error="bad", retry_delay=2.0)])

    assert _rows(job_id) == [(1, "retried", "bad", None, "")]
    assert [(a.attempt, a.outcome) for a in _attempts(job_id)] == [(1, "retried")]


# --- the sweeper's lost attempts --------------------------------------------------------


@pytest.mark.django_db(databases="__all__", transaction=True)
def test_an_attempt_the_sweeper_takes_back_is_lost_and_its_late_outcome_adds_nothing(claims):
    shard = ShardStore(alias=ALIAS, shard_id=SHARD)
    epoch = shard.acquire_lease(owner="history")
    retried = _job(status="running", attempts=1, max_attempts=3, lease=EXPIRED)
    started_at = _job_row(retried).started_at
    late = Attempt(**_claimed_fields(retried))  # as its executor claimed it

    assert shard.sweep(epoch=epoch).abandoned == 1
    claims.record([Outcome(attempt=late, succeeded=True)])

    [row] = _history(retried)
    assert (row.attempt, row.outcome, row.error) == (
        1,
        "lost",
        scheduler_queries.LOST_ATTEMPT_ERROR,
    )
    assert row.started_at == started_at
    assert row.finished_at > started_at


@pytest.mark.django_db(databases="__all__", transaction=True)
def test_a_last_attempt_the_sweeper_fails_is_lost():
    shard = ShardStore(alias=ALIAS, shard_id=SHARD)
    epoch = shard.acquire_lease(owner="history")
    exhausted = _job(status="running", attempts=3, max_attempts=3, lease=EXPIRED)

    assert shard.fail_abandoned(epoch=epoch, dead_letter=lambda jobs: True) == 1

    assert [(row.attempt, row.outcome) for row in _history(exhausted)] == [(3, "lost")]
    assert _job_row(exhausted).status == "failed"


# --- retention ---------------------------------------------------------------------------


@pytest.mark.django_db(databases="__all__", transaction=True)
def test_the_purge_deletes_a_jobs_attempts_with_it(claims):
    shard = ShardStore(alias=ALIAS, shard_id=SHARD)
    old, recent = _job(), _job()
    for job_id in (old, recent):
        claims.record([Outcome(attempt=_claim(claims, job_id), succeeded=True)])
    Job.objects.using(ALIAS).filter(pk=old).update(finished_at=timezone.now() - timedelta(days=40))

    purged = shard.purge_finished_jobs(
        finished_before=timezone.now() - timedelta(days=30), limit=10
    )

    assert purged == 1
    assert _history(old) == []
    assert [row.outcome for row in _history(recent)] == ["succeeded"]


def _claimed_fields(job_id: str) -> dict:
    job = _job_row(job_id)
    return {
        "job_id": job.id,
        "user_id": job.user_id,
        "shard_id": job.shard_id,
        "attempt": job.attempts,
        "max_attempts": job.max_attempts,
        "timeout_seconds": job.timeout_seconds,
        "handler": job.handler,
        "handler_params": job.handler_params,
        "message": job.message,
        "execute_at": job.execute_at,
        "due_at": job.due_at,
        "created_at": job.created_at,
        "attempt_errors": job.attempt_errors,
    }
