"""ClaimStore against a real shard: claims start only the attempts a message names, and
outcomes change only the attempt they belong to.

Each test runs in one transaction, so PostgreSQL's ``now()`` is the same instant in every
statement: lease and backoff arithmetic can be checked exactly.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from executor_worker import queries
from executor_worker.claims import Attempt, ClaimRequest, ClaimStore, Outcome
from jobsvc.jobs import store
from jobsvc.jobs.models import Job, JobAttempt
from jobsvc.jobs.specs import JobSpec
from jobsvc.sharding.ids import new_job_id
from jobsvc.sharding.shards import shard_alias
from tests.integration.plans import explain, rows_read, scans_of_jobs

pytestmark = pytest.mark.django_db(databases="__all__")

SHARD = 1
ALIAS = shard_alias(SHARD)
LEASE = 7.0  # seconds a running attempt holds its job before its executor renews it
TIMEOUT = 12.5  # seconds, each job's timeout_seconds


@pytest.fixture
def claims() -> ClaimStore:
    return ClaimStore(shard_id=SHARD, lease_seconds=LEASE)


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


def _req(job_id: str, attempt: int = 1, **changed) -> ClaimRequest:
    """The request a message of ``job_id`` makes: the job's user and due time as stored,
    unless ``changed`` says otherwise."""
    job = Job.objects.using(ALIAS).filter(pk=job_id).first()
    request = ClaimRequest(
        job_id=job_id,
        attempt=attempt,
        user_id=job.user_id if job else 42,
        due_at=job.due_at if job else timezone.now(),
    )
    return request._replace(**changed)


def _claim_one(claims: ClaimStore, job_id: str, attempt: int = 1) -> Attempt:
    [claimed] = claims.claim([_req(job_id, attempt)])
    return claimed


# --- claim --------------------------------------------------------------------------


def test_claiming_a_queued_job_starts_its_first_attempt(claims):
    job_id = _job(params={}, attempt_errors=[])

    [attempt] = claims.claim([_req(job_id, 1)])

    assert (attempt.job_id, attempt.attempt, attempt.shard_id) == (job_id, 1, SHARD)
    assert (attempt.user_id, attempt.message, attempt.handler) == (42, "claim me", "default")
    assert (attempt.max_attempts, attempt.timeout_seconds) == (3, TIMEOUT)
    job = _stored(job_id)
    assert (job.status, job.attempts) == ("running", 1)
    assert job.started_at is not None
    assert job.lease_expires_at - job.started_at == timedelta(seconds=LEASE)


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

    assert claims.claim([_req(job_id, 1)]) == []
    assert _stored(job_id).attempts == 1


def test_the_same_attempt_twice_in_one_batch_is_claimed_once(claims):
    job_id = _job()

    claimed = claims.claim([_req(job_id, 1), _req(job_id, 1)])

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

    assert claims.claim([_req(job_id, message_attempt)]) == []
    job = _stored(job_id)
    assert (job.status, job.attempts) == ("scheduled", attempts)


@pytest.mark.parametrize("status", ["running", "succeeded", "failed", "cancelled"])
def test_a_job_that_is_not_waiting_to_run_is_not_claimed(claims, status):
    job_id = _job(status=status)

    assert claims.claim([_req(job_id, 1)]) == []
    job = _stored(job_id)
    assert (job.status, job.attempts, job.started_at) == (status, 0, None)


def test_a_scheduled_job_is_claimed_once_due_but_not_before(claims):
    """The sweeper may make a queued job scheduled again while its message is only late."""
    due = _job(status="scheduled", due_in=-1)
    not_due = _job(status="scheduled", due_in=3600)

    claimed = claims.claim([_req(due, 1), _req(not_due, 1)])

    assert [a.job_id for a in claimed] == [due]
    assert _stored(not_due).status == "scheduled"


def test_one_claim_starts_the_startable_jobs_and_drops_the_rest(claims):
    startable = [_job() for _ in range(3)]
    cancelled = _job(status="cancelled")
    stale = _job(status="queued", attempts=1)
    unknown = new_job_id(shard_id=SHARD)

    claimed = claims.claim([_req(j, 1) for j in [*startable, cancelled, stale, unknown]])

    assert sorted(a.job_id for a in claimed) == sorted(startable)
    assert _stored(cancelled).status == "cancelled"
    assert (_stored(stale).status, _stored(stale).attempts) == ("queued", 1)


def test_a_queued_job_is_not_claimed_before_its_due_time_by_the_databases_clock(claims):
    """Schedulers publish up to a second ahead; an executor whose clock runs ahead would
    try early. The claim refuses, and says when the job is due."""
    early = _job(status="queued", due_in=3600)

    assert claims.claim([_req(early)]) == []
    assert claims.claim_succeeded([_req(early)], handlers=["default"]) == []
    due = _stored(early).due_at.timestamp()
    assert claims.not_yet_due([_req(early)]) == {(early, 1): pytest.approx(due)}
    assert (_stored(early).status, _stored(early).attempts) == ("queued", 0)


def test_only_attempts_that_would_start_once_due_are_not_yet_due(claims):
    early = _job(due_in=3600)
    others = [
        _job(),  # due: claimable now
        _job(status="cancelled", due_in=3600),
        _job(status="queued", attempts=1, due_in=3600),  # the message's attempt ran
        new_job_id(shard_id=SHARD),
    ]
    named = [_req(job_id) for job_id in [early, *others]]
    assert set(claims.not_yet_due(named)) == {(early, 1)}


@pytest.mark.parametrize(
    "changed",
    [{"user_id": 43}, {"due_at": timezone.now() - timedelta(hours=2)}],
    ids=["another-user", "another-due-time"],
)
def test_a_message_that_does_not_match_the_jobs_row_claims_nothing(claims, changed):
    """Executors trust nothing in a message but the job and attempt it names: its user
    and due time must be the row's too (a forged or stale message starts nothing)."""
    job_id = _job()

    assert claims.claim([_req(job_id, **changed)]) == []
    assert claims.claim_succeeded([_req(job_id, **changed)], handlers=["default"]) == []
    assert (_stored(job_id).status, _stored(job_id).attempts) == ("queued", 0)


def _backlog_called_tiny(statuses: list[str]) -> list[str]:
    """One job of each status listed (a running one in its first attempt), then statistics
    that call the table tiny, as an idle shard's do when a backlog arrives: joined to the
    names, the planner read every job for each claim (4.2 s for 250 names among 75,000
    jobs)."""
    now = timezone.now()
    spec = JobSpec(
        message="backlog",
        execute_at=now - timedelta(minutes=1),
        max_attempts=3,
        timeout_seconds=TIMEOUT,
    )
    ids = [new_job_id(shard_id=SHARD, at=now) for _ in statuses]
    rows = [
        store.new_job_row(job_id=i, user_id=42, spec=spec, shard_id=SHARD, now=now) for i in ids
    ]
    store.insert_jobs(ALIAS, rows)
    for status in set(statuses):
        Job.objects.using(ALIAS).filter(
            pk__in=[i for i, s in zip(ids, statuses, strict=True) if s == status]
        ).update(status=status, attempts=1 if status == "running" else 0)
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("ANALYZE jobs")
        cursor.execute("UPDATE pg_class SET reltuples = 1 WHERE relname = 'jobs'")
    return ids


# How the planner joins the names to the jobs turns on costs that vary from run to run:
# joined by id alone, it once read the whole table by the primary key for a merge join,
# in one run of ten. A test can forbid all joins but one (within its transaction) so
# that each is tested. (The claims' probes are nested loops whatever the costs.)
JOINS = {"hash": "enable_hashjoin", "merge": "enable_mergejoin", "nested loop": "enable_nestloop"}


def _scans_by(statement: str, params: dict, join: str | None = None) -> list[dict]:
    with connections[ALIAS].cursor() as cursor:
        for other in set(JOINS.values()) - {JOINS.get(join)} if join else ():
            cursor.execute(f"SET LOCAL {other} = off")
        return scans_of_jobs(explain(cursor, getattr(queries, statement), params))


def _how(scans: list[dict]) -> list[tuple]:
    """What an assertion message shows of the scans: enough to tell a plan that flipped."""
    return [
        (s["Node Type"], s.get("Index Name"), s["Actual Rows"], s["Actual Loops"]) for s in scans
    ]


@pytest.mark.parametrize("statement", ["CLAIM", "CLAIM_SUCCEEDED", "NOT_YET_DUE"])
def test_a_claim_reads_only_the_jobs_named_whatever_the_statistics_say(statement):
    backlog = 3000
    ids = _backlog_called_tiny(["queued"] * backlog)
    named = [_req(job_id) for job_id in ids[:: backlog // 20]]
    params = {
        "job_ids": [r.job_id for r in named],
        "attempts": [r.attempt for r in named],
        "user_ids": [r.user_id for r in named],
        "due_ats": [r.due_at for r in named],
        "lease": LEASE,
        "handlers": ["default"],
    }

    # Each name is looked up once, and an updated row is found again once, by its ctid.
    scans = _scans_by(statement, params)
    assert rows_read(scans) <= 2 * len(named), _how(scans)


@pytest.mark.parametrize("join", JOINS)
@pytest.mark.parametrize(
    "statement",
    ["RENEW_LEASES", "REOPEN", "SUCCEED", "RETRY", "NOT_STARTED", "FAIL", "RECORD_ATTEMPTS"],
)
def test_recording_reads_no_waiting_or_finished_job_whatever_the_statistics_say(statement, join):
    """Outcomes are found by their ids, or through the index of jobs in flight (queued or
    running), which the schedulers' in-flight limit bounds: neither a backlog waiting in
    the shard nor the finished jobs it keeps are read."""
    every = 150
    statuses = [
        "running" if n % every == 0 else "scheduled" if n % 2 else "succeeded" for n in range(3000)
    ]
    named = _backlog_called_tiny(statuses)[::every]  # the running ones
    params = {
        "job_ids": named,
        "attempts": [1] * len(named),
        "lease": LEASE,
        "delays": [1.0] * len(named),
        "errors": ["boom"] * len(named),
        "outcomes": ["error"] * len(named),
        "http_statuses": [None] * len(named),
        "excerpts": [None] * len(named),
        # What ``record`` passes for succeeded outcomes (the statement before it, in the
        # same transaction, made them so): the finished jobs the shard keeps are many.
        "status": "succeeded",
    }
    in_flight = Job.objects.using(ALIAS).filter(status__in=["queued", "running"]).count()

    # The names, and at most every job in flight (the 20 named and any other tests left).
    scans = _scans_by(statement, params, join)
    assert rows_read(scans) <= len(named) + in_flight, (in_flight, _how(scans))


def test_renewing_extends_the_lease_of_attempts_still_running_here(claims):
    running = _job()
    _claim_one(claims, running)
    given_up = _job()
    _claim_one(claims, given_up)
    Job.objects.using(ALIAS).filter(pk=given_up).update(status="scheduled")  # the sweeper
    Job.objects.using(ALIAS).filter(pk=running).update(lease_expires_at=timezone.now())

    assert claims.renew([(running, 1), (given_up, 1), (running, 2)]) == 1

    job = _stored(running)
    assert job.lease_expires_at - job.started_at == timedelta(seconds=LEASE)
    assert _stored(given_up).status == "scheduled"


def test_claiming_nothing_asks_nothing(claims, django_assert_num_queries):
    with django_assert_num_queries(0, using=ALIAS):
        assert claims.claim([]) == []
        assert claims.not_yet_due([]) == {}
        assert claims.renew([]) == 0


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


def test_attempt_errors_keep_the_last_entries_only(claims):
    many = [{"attempt": n, "error": f"e{n}", "at": "2030-01-01T00:00:00Z"} for n in range(1, 26)]
    job_id = _job(status="scheduled", attempts=25, max_attempts=30, attempt_errors=many)
    attempt = _claim_one(claims, job_id, attempt=26)

    claims.record([Outcome(attempt=attempt, succeeded=False, error="e26", retry_delay=1.0)])

    errors = [entry["error"] for entry in _stored(job_id).attempt_errors]
    assert errors == [f"e{n}" for n in range(2, 27)]  # MAX_ATTEMPT_ERRORS, the newest


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
    attempts = {a.job_id: a for a in claims.claim([_req(ok, 1), _req(retry, 1), _req(fail, 1)])}

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

    [done] = claims.claim_succeeded([_req(inline, 1), _req(other, 1)], handlers=["default"])

    assert (done.job_id, done.attempt, done.handler) == (inline, 1, "default")
    finished = _stored(inline)
    assert (finished.status, finished.attempts) == ("succeeded", 1)
    assert finished.started_at == finished.finished_at is not None
    assert finished.lease_expires_at is None
    assert (_stored(other).status, _stored(other).attempts) == ("queued", 0)
    assert [a.job_id for a in claims.claim([_req(inline, 1), _req(other, 1)])] == [other]


@pytest.mark.parametrize(
    ("status", "attempts", "message_attempt"),
    [("queued", 1, 1), ("cancelled", 0, 1), ("running", 0, 1), ("scheduled", 0, 2)],
    ids=["already-ran", "cancelled", "running", "future-attempt"],
)
def test_claim_succeeded_checks_status_and_attempt_like_claim(
    claims, status, attempts, message_attempt
):
    job_id = _job(status=status, attempts=attempts)

    assert claims.claim_succeeded([_req(job_id, message_attempt)], handlers=["default"]) == []
    assert (_stored(job_id).status, _stored(job_id).attempts) == (status, attempts)


def test_claim_succeeded_without_inline_handlers_asks_nothing(claims, django_assert_num_queries):
    request = _req(_job())

    with django_assert_num_queries(0, using=ALIAS):
        assert claims.claim_succeeded([request], handlers=[]) == []


def test_a_reopened_attempt_is_running_and_takes_its_outcome_like_a_claimed_one(claims):
    job_id = _job()
    [attempt] = claims.claim_succeeded([_req(job_id, 1)], handlers=["default"])

    claims.reopen([attempt])

    running = _stored(job_id)
    assert (running.status, running.attempts, running.finished_at) == ("running", 1, None)
    assert running.lease_expires_at - running.started_at == timedelta(seconds=LEASE)
    claims.record([Outcome(attempt=attempt, succeeded=False, error="bad", retry_delay=2.0)])
    retried = _stored(job_id)
    assert (retried.status, retried.last_error) == ("scheduled", "bad")


def test_an_attempt_that_did_not_start_is_not_counted_and_is_due_again(claims):
    job_id = _job()
    stale = _req(job_id)
    attempt = _claim_one(claims, job_id)

    claims.record([Outcome(attempt=attempt, succeeded=False, retry_delay=0.0, started=False)])

    job = _stored(job_id)
    assert (job.status, job.attempts, job.last_error, job.attempt_errors) == (
        "scheduled",
        0,
        "",
        [],
    )
    assert job.started_at is None and job.lease_expires_at is None
    assert not JobAttempt.objects.using(ALIAS).filter(job_id=job_id).exists()
    assert claims.claim([stale]) == []  # a stale message names the old due time
    again = _claim_one(claims, job_id)  # the next dispatch names attempt 1 again
    assert again.attempt == 1


def test_an_attempt_that_did_not_start_after_a_retry_keeps_the_first_attempts_start(claims):
    job_id = _job()
    first = _claim_one(claims, job_id)
    claims.record([Outcome(attempt=first, succeeded=False, error="boom", retry_delay=0.0)])
    started_first = timezone.now() - timedelta(minutes=5)  # now() is one instant here
    JobAttempt.objects.using(ALIAS).filter(job_id=job_id).update(started_at=started_first)
    second = _claim_one(claims, job_id, attempt=2)

    claims.record([Outcome(attempt=second, succeeded=False, retry_delay=30.0, started=False)])

    job = _stored(job_id)
    assert (job.status, job.attempts, job.started_at) == ("scheduled", 1, started_first)
    assert job.due_at - job.updated_at == timedelta(seconds=30)
    assert [e["error"] for e in job.attempt_errors] == ["boom"]
    assert claims.claim([_req(job_id, attempt=2)]) == []  # not before its new due time
