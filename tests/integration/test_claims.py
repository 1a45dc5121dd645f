"""ClaimStore against a real shard: claims start only the attempts a message names, and
outcomes change only the attempt they belong to.

Each test runs in one transaction, so PostgreSQL's ``now()`` is the same instant in every
statement: lease and backoff arithmetic can be checked exactly.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connections, transaction
from django.db.models.expressions import RawSQL
from django.utils import timezone

from executor_worker.claims import Attempt, ClaimStore, Outcome
from jobsvc.jobs import store
from jobsvc.jobs.models import Job
from jobsvc.jobs.specs import JobSpec
from jobsvc.sharding.ids import new_job_id
from jobsvc.sharding.shards import shard_alias

pytestmark = pytest.mark.django_db(databases="__all__")

SHARD = 1
ALIAS = shard_alias(SHARD)
GRACE = 7.0  # seconds of lease beyond a job's timeout
TIMEOUT = 12.5  # seconds, each job's timeout_seconds


@pytest.fixture
def claims() -> ClaimStore:
    return ClaimStore(shard_id=SHARD, lease_grace_seconds=GRACE)


def _job(
    *,
    status: str = "queued",
    attempts: int = 0,
    due_in: float = -60.0,
    max_attempts: int = 3,
    handler: str = "default",
    params: dict | None = None,
    attempt_errors: list | None = None,
    user_id: int = 42,
    created_in: float = 0.0,
) -> str:
    now = timezone.now() + timedelta(seconds=created_in)
    spec = JobSpec(
        message="claim me",
        execute_at=now + timedelta(seconds=due_in),
        max_attempts=max_attempts,
        timeout_seconds=TIMEOUT,
        handler=handler,
        handler_params=params or {},
    )
    job_id = new_job_id(shard_id=SHARD, at=now)
    row = store.new_job_row(job_id=job_id, user_id=user_id, spec=spec, shard_id=SHARD, now=now)
    store.insert_jobs(ALIAS, [row])
    Job.objects.using(ALIAS).filter(pk=job_id).update(
        status=status, attempts=attempts, attempt_errors=attempt_errors or []
    )
    return job_id


def _stored(job_id: str) -> Job:
    return Job.objects.using(ALIAS).get(pk=job_id)


def _claim_one(claims: ClaimStore, job_id: str, attempt: int = 1) -> Attempt:
    [claimed] = claims.claim([(job_id, attempt)])
    return claimed


# --- claim --------------------------------------------------------------------------


def test_claiming_a_queued_job_starts_its_first_attempt(claims):
    job_id = _job(params={}, attempt_errors=[])

    [attempt] = claims.claim([(job_id, 1)])

    assert (attempt.job_id, attempt.attempt, attempt.shard_id) == (job_id, 1, SHARD)
    assert (attempt.user_id, attempt.message, attempt.handler) == (42, "claim me", "default")
    assert (attempt.max_attempts, attempt.timeout_seconds) == (3, TIMEOUT)
    job = _stored(job_id)
    assert (job.status, job.attempts) == ("running", 1)
    assert job.started_at is not None
    assert job.lease_expires_at - job.started_at == timedelta(seconds=TIMEOUT + GRACE)


def test_a_claimed_attempt_carries_the_jobs_parameters_and_earlier_errors_decoded(claims):
    errors = [{"attempt": 1, "error": "RetryableError: boom", "at": "2030-01-01T00:00:00Z"}]
    job_id = _job(
        status="scheduled",
        attempts=1,
        handler="http",
        params={"url": "https://hooks.example.com/x"},
        attempt_errors=errors,
    )

    attempt = _claim_one(claims, job_id, attempt=2)

    assert attempt.handler_params == {"url": "https://hooks.example.com/x"}
    assert attempt.attempt_errors == errors


def test_a_duplicate_message_cannot_claim_the_attempt_again(claims):
    job_id = _job()
    _claim_one(claims, job_id)

    assert claims.claim([(job_id, 1)]) == []
    assert _stored(job_id).attempts == 1


def test_the_same_attempt_twice_in_one_batch_is_claimed_once(claims):
    job_id = _job()

    claimed = claims.claim([(job_id, 1), (job_id, 1)])

    assert [a.job_id for a in claimed] == [job_id]
    assert _stored(job_id).attempts == 1


@pytest.mark.parametrize(
    ("attempts", "message_attempt"),
    [(1, 1), (2, 1), (0, 2)],
    ids=["attempt-already-ran", "older-attempt", "attempt-from-the-future"],
)
def test_an_attempt_that_does_not_follow_the_jobs_attempts_is_not_claimed(
    claims, attempts, message_attempt
):
    job_id = _job(status="scheduled", attempts=attempts)

    assert claims.claim([(job_id, message_attempt)]) == []
    job = _stored(job_id)
    assert (job.status, job.attempts) == ("scheduled", attempts)


@pytest.mark.parametrize("status", ["running", "succeeded", "failed", "cancelled"])
def test_a_job_that_is_not_waiting_to_run_is_not_claimed(claims, status):
    job_id = _job(status=status)

    assert claims.claim([(job_id, 1)]) == []
    job = _stored(job_id)
    assert (job.status, job.attempts, job.started_at) == (status, 0, None)


def test_a_scheduled_job_is_claimed_once_due_but_not_before(claims):
    """The sweeper may make a queued job scheduled again while its message is only late."""
    due = _job(status="scheduled", due_in=-1)
    not_due = _job(status="scheduled", due_in=3600)

    claimed = claims.claim([(due, 1), (not_due, 1)])

    assert [a.job_id for a in claimed] == [due]
    assert _stored(not_due).status == "scheduled"


def test_one_claim_starts_the_startable_jobs_and_drops_the_rest(claims):
    startable = [_job() for _ in range(3)]
    cancelled = _job(status="cancelled")
    stale = _job(status="queued", attempts=1)
    unknown = new_job_id(shard_id=SHARD)

    claimed = claims.claim([(j, 1) for j in [*startable, cancelled, stale, unknown]])

    assert sorted(a.job_id for a in claimed) == sorted(startable)
    assert _stored(cancelled).status == "cancelled"
    assert (_stored(stale).status, _stored(stale).attempts) == ("queued", 1)


def test_the_startable_attempts_are_those_a_claim_would_start_and_none_is_started(claims):
    startable = [_job(), _job(status="scheduled", due_in=-1)]
    started_elsewhere = _job()
    claims.claim([(started_elsewhere, 1)])
    others = [
        _job(status="cancelled"),
        _job(status="queued", attempts=1),  # the message is of an earlier attempt
        _job(status="scheduled", due_in=3600),
        new_job_id(shard_id=SHARD),
    ]
    named = [(job_id, 1) for job_id in [*startable, started_elsewhere, *others]]

    assert claims.startable(named) == {(job_id, 1) for job_id in startable}
    assert {_stored(job_id).status for job_id in startable} == {"queued", "scheduled"}
    assert sorted(a.job_id for a in claims.claim(named)) == sorted(startable)


def test_claiming_nothing_asks_nothing(claims, django_assert_num_queries):
    with django_assert_num_queries(0, using=ALIAS):
        assert claims.claim([]) == []
        assert claims.startable([]) == set()


# --- record -------------------------------------------------------------------------


def test_a_success_finishes_the_job(claims):
    job_id = _job()
    attempt = _claim_one(claims, job_id)

    claims.record([Outcome(attempt=attempt, succeeded=True)])

    job = _stored(job_id)
    assert (job.status, job.attempts, job.last_error) == ("succeeded", 1, "")
    assert job.finished_at is not None
    assert job.lease_expires_at is None


def test_a_retryable_failure_schedules_the_next_attempt_after_the_delay(claims):
    job_id = _job()
    attempt = _claim_one(claims, job_id)

    claims.record(
        [Outcome(attempt=attempt, succeeded=False, error="RetryableError: 503", retry_delay=4.5)]
    )

    job = _stored(job_id)
    assert (job.status, job.attempts) == ("scheduled", 1)
    assert job.due_at - job.updated_at == timedelta(seconds=4.5)
    assert job.last_error == "RetryableError: 503"
    assert [(e["attempt"], e["error"]) for e in job.attempt_errors] == [(1, "RetryableError: 503")]
    assert job.attempt_errors[0]["at"]
    assert job.lease_expires_at is None
    assert job.finished_at is None


def test_the_retried_job_can_claim_its_next_attempt_when_due(claims):
    job_id = _job()
    first = _claim_one(claims, job_id)
    claims.record([Outcome(attempt=first, succeeded=False, error="boom", retry_delay=0.0)])

    second = _claim_one(claims, job_id, attempt=2)

    assert second.attempt == 2
    assert [e["error"] for e in second.attempt_errors] == ["boom"]


def test_a_final_failure_fails_the_job_and_keeps_every_error(claims):
    earlier = [{"attempt": 1, "error": "first", "at": "2030-01-01T00:00:00Z"}]
    job_id = _job(status="scheduled", attempts=1, max_attempts=2, attempt_errors=earlier)
    attempt = _claim_one(claims, job_id, attempt=2)

    claims.record([Outcome(attempt=attempt, succeeded=False, error="second")])

    job = _stored(job_id)
    assert (job.status, job.attempts, job.last_error) == ("failed", 2, "second")
    assert [(e["attempt"], e["error"]) for e in job.attempt_errors] == [
        (1, "first"),
        (2, "second"),
    ]
    assert job.finished_at is not None
    assert job.lease_expires_at is None


def test_one_record_call_writes_every_kind_of_outcome(claims):
    ok, retry, fail = _job(), _job(), _job()
    attempts = {a.job_id: a for a in claims.claim([(ok, 1), (retry, 1), (fail, 1)])}

    claims.record(
        [
            Outcome(attempt=attempts[ok], succeeded=True),
            Outcome(attempt=attempts[retry], succeeded=False, error="later", retry_delay=1.0),
            Outcome(attempt=attempts[fail], succeeded=False, error="never"),
        ]
    )

    assert [_stored(j).status for j in (ok, retry, fail)] == ["succeeded", "scheduled", "failed"]


@pytest.mark.parametrize(
    "outcome",
    [
        {"succeeded": True},
        {"succeeded": False, "error": "late", "retry_delay": 1.0},
        {"succeeded": False, "error": "late"},
    ],
    ids=["succeeded", "retry", "failed"],
)
def test_an_outcome_of_a_stale_attempt_changes_nothing(claims, outcome):
    """The sweeper gave attempt 1 up and attempt 2 now runs; attempt 1 reports late."""
    job_id = _job()
    first = _claim_one(claims, job_id)
    Job.objects.using(ALIAS).filter(pk=job_id).update(status="scheduled")  # the sweeper
    _claim_one(claims, job_id, attempt=2)
    before = _stored(job_id)

    claims.record([Outcome(attempt=first, **outcome)])

    after = _stored(job_id)
    assert (after.status, after.attempts) == ("running", 2)
    assert (after.last_error, after.attempt_errors) == (before.last_error, before.attempt_errors)
    assert after.lease_expires_at == before.lease_expires_at
    assert after.finished_at is None


@pytest.mark.parametrize("status", ["scheduled", "succeeded", "failed", "cancelled"])
def test_an_outcome_for_a_job_no_longer_running_changes_nothing(claims, status):
    job_id = _job()
    attempt = _claim_one(claims, job_id)
    Job.objects.using(ALIAS).filter(pk=job_id).update(status=status)

    claims.record(
        [
            Outcome(attempt=attempt, succeeded=True),
            Outcome(attempt=attempt, succeeded=False, error="x", retry_delay=1.0),
            Outcome(attempt=attempt, succeeded=False, error="x"),
        ]
    )

    job = _stored(job_id)
    assert (job.status, job.last_error, job.attempt_errors) == (status, "", [])


# --- inline handlers: started and finished in one write ------------------------------


def test_claim_succeeded_starts_and_finishes_only_jobs_of_the_given_handlers(claims):
    inline = _job()
    other = _job(handler="http", params={"url": "https://hooks.example.com/x"})

    [done] = claims.claim_succeeded([(inline, 1), (other, 1)], handlers=["default"])

    assert (done.job_id, done.attempt, done.handler) == (inline, 1, "default")
    finished = _stored(inline)
    assert (finished.status, finished.attempts) == ("succeeded", 1)
    assert finished.started_at == finished.finished_at is not None
    assert finished.lease_expires_at is None
    assert (_stored(other).status, _stored(other).attempts) == ("queued", 0)
    assert [a.job_id for a in claims.claim([(inline, 1), (other, 1)])] == [other]


@pytest.mark.parametrize(
    ("status", "attempts", "message_attempt"),
    [("queued", 1, 1), ("cancelled", 0, 1), ("running", 0, 1), ("scheduled", 0, 2)],
    ids=["already-ran", "cancelled", "running", "future-attempt"],
)
def test_claim_succeeded_checks_status_and_attempt_like_claim(
    claims, status, attempts, message_attempt
):
    job_id = _job(status=status, attempts=attempts)

    assert claims.claim_succeeded([(job_id, message_attempt)], handlers=["default"]) == []
    assert (_stored(job_id).status, _stored(job_id).attempts) == (status, attempts)


def test_claim_succeeded_without_inline_handlers_asks_nothing(claims, django_assert_num_queries):
    job_id = _job()

    with django_assert_num_queries(0, using=ALIAS):
        assert claims.claim_succeeded([(job_id, 1)], handlers=[]) == []


def test_a_reopened_attempt_is_running_and_takes_its_outcome_like_a_claimed_one(claims):
    job_id = _job()
    [attempt] = claims.claim_succeeded([(job_id, 1)], handlers=["default"])

    claims.reopen([attempt])

    running = _stored(job_id)
    assert (running.status, running.attempts, running.finished_at) == ("running", 1, None)
    assert running.lease_expires_at - running.started_at == timedelta(seconds=TIMEOUT + GRACE)
    claims.record([Outcome(attempt=attempt, succeeded=False, error="bad", retry_delay=2.0)])
    retried = _stored(job_id)
    assert (retried.status, retried.last_error) == ("scheduled", "bad")


# --- work stealing -------------------------------------------------------------------


def test_work_stealing_finds_the_newest_half_of_each_users_published_due_unstarted_jobs(claims):
    jobs = [_job(user_id=42, created_in=-6.0 + i) for i in range(5)]  # oldest first
    _job(user_id=42, created_in=1.0, due_in=60.0)  # published ahead: not due yet
    _job(user_id=42, created_in=2.0, status="running", attempts=1)
    _job(user_id=42, created_in=3.0, status="scheduled")
    others = [_job(user_id=43, attempts=1, created_in=-2.0 + i) for i in range(2)]
    _job(user_id=44)  # not asked for

    found = claims.work_to_steal({42: 4.0, 43: 1.0}, per_user=10)

    # Half of five, rounded up; the executor holding their messages keeps the older two.
    assert sorted((m.job_id, m.attempt, m.user_id, m.weight) for m in found) == sorted(
        [
            (jobs[4], 1, 42, 4.0),
            (jobs[3], 1, 42, 4.0),
            (jobs[2], 1, 42, 4.0),
            (others[1], 2, 43, 1.0),
        ]
    )
    assert {(m.shard_id, m.handler) for m in found} == {(SHARD, "default")}
    assert claims.work_to_steal({42: 4.0}, per_user=1) == [m for m in found if m.job_id == jobs[4]]


def test_work_stealing_leaves_out_the_jobs_the_executor_holds_itself(claims):
    """An executor looks before it runs dry (executor_worker.work_stealing): the jobs it
    still holds are queued too, and must not come back to it as stolen."""
    jobs = [_job(user_id=42, created_in=-6.0 + i) for i in range(5)]  # oldest first

    found = claims.work_to_steal({42: 4.0}, per_user=10, held=[jobs[4], jobs[0]])

    # Of the three others, the newer two (half, rounded up).
    assert sorted(m.job_id for m in found) == sorted([jobs[3], jobs[2]])


def test_work_stealing_leaves_out_jobs_published_or_due_only_just_now(claims):
    """Those are on their way to an executor that keeps up: not waiting in one that does
    not."""
    waiting = _job(user_id=42, created_in=-5.0)
    just_published = _job(user_id=42, created_in=-4.0)
    just_due = _job(user_id=42, created_in=-3.0)
    # In the database's time: the query compares with now(), its transaction's start
    # (Django's Now() is the statement's).
    jobs = Job.objects.using(ALIAS)
    jobs.filter(pk=waiting).update(dispatched_at=RawSQL("now() - interval '2 s'", []))
    jobs.filter(pk=just_published).update(dispatched_at=RawSQL("now()", []))
    jobs.filter(pk=just_due).update(due_at=RawSQL("now() - interval '0.1 s'", []))

    found = claims.work_to_steal({42: 1.0}, per_user=10, waited=0.5)

    assert [m.job_id for m in found] == [waiting]
    assert {m.job_id for m in claims.work_to_steal({42: 1.0}, per_user=10)} == {
        just_due,
        just_published,
    }  # the newer two of the three, with no wait asked for


def test_a_users_last_queued_job_is_found_too(claims):
    """Or an executor that holds messages and runs nothing would keep one job a shard."""
    job_id = _job(user_id=42)
    assert [m.job_id for m in claims.work_to_steal({42: 1.0}, per_user=10)] == [job_id]


def test_a_stolen_job_is_started_once_whichever_executor_claims_it_first(claims):
    _job(created_in=-1.0)
    job_id = _job()
    [stolen] = claims.work_to_steal({42: 1.0}, per_user=10)
    assert stolen.job_id == job_id

    assert [a.job_id for a in claims.claim([(job_id, 1)], stolen=True)] == [job_id]
    assert claims.claim([(job_id, 1)]) == []  # the message's copy, claimed second
    assert claims.claim([(job_id, 1)], stolen=True) == []
    assert _stored(job_id).attempts == 1


@pytest.mark.django_db(databases="__all__", transaction=True)
def test_a_stolen_job_another_transaction_has_locked_is_dropped_not_waited_for(claims):
    """The executor holding the job's message may be claiming it at this moment: waiting
    for it could deadlock the two claims (each holding rows the other wants)."""
    job_id = _job()
    locked, release = threading.Event(), threading.Event()

    def hold_the_row() -> None:
        try:
            with transaction.atomic(using=ALIAS):
                Job.objects.using(ALIAS).select_for_update().get(pk=job_id)
                locked.set()
                release.wait(timeout=10)  # a claim that waits for it fails the test
        finally:
            connections[ALIAS].close()

    holder = threading.Thread(target=hold_the_row)
    holder.start()
    try:
        assert locked.wait(timeout=10)
        assert claims.claim([(job_id, 1)], stolen=True) == []
        assert claims.claim_succeeded([(job_id, 1)], handlers=["default"], stolen=True) == []
    finally:
        release.set()
        holder.join()
    assert [a.job_id for a in claims.claim([(job_id, 1)], stolen=True)] == [job_id]
