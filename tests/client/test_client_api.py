"""The client against the API served by gunicorn: every operation, over real HTTP."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import Resolver404, resolve

from jobsvc.jobs.models import Job, JobAttempt
from jobsvc.sharding.ids import shard_of
from jobsvc.sharding.shards import shard_alias
from jobsvc_client import (
    AuthError,
    Client,
    Conflict,
    Forbidden,
    JobFilter,
    JobSpec,
    NotFound,
    NotLoggedIn,
    Unprocessable,
)
from jobsvc_client.transport import UrllibTransport
from tests.conftest import DEFAULT_PASSWORD
from tests.served_api import serving_api

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)


def _later(minutes: float = 5) -> datetime:
    return datetime.now(UTC) + timedelta(minutes=minutes)


def test_a_logged_in_client_creates_reads_and_cancels_a_job(client):
    execute_at = _later()
    job = client.create_job(message="Hello world", execute_at=execute_at, max_attempts=2)

    assert job.status == "scheduled"
    assert job.execute_at == execute_at
    assert (job.message, job.max_attempts) == ("Hello world", 2)
    assert client.get_job(job.id) == job
    cancelled = client.cancel_job(job.id)
    assert cancelled.status == "cancelled"
    assert cancelled.finished
    assert client.cancel_job(job.id).status == "cancelled"  # again: a no-op


def test_a_create_retried_with_the_same_key_returns_the_first_job(client):
    execute_at = _later()
    first = client.create_job(message="once", execute_at=execute_at, idempotency_key="k-1")
    again = client.create_job(message="once", execute_at=execute_at, idempotency_key="k-1")

    assert again.id == first.id
    assert [job.id for job in client.iter_jobs()] == [first.id]
    with pytest.raises(Unprocessable) as raised:
        client.create_job(message="other", execute_at=execute_at, idempotency_key="k-1")
    assert (raised.value.status, raised.value.code) == (422, "idempotency_key_reused")


def test_many_jobs_are_created_in_one_request(client):
    specs = [JobSpec(message=f"job {n}", execute_at=_later(n + 1)) for n in range(5)]

    jobs = client.create_jobs(specs, idempotency_key="bulk-1")

    assert [job.message for job in jobs] == [spec.message for spec in specs]
    assert [job.id for job in client.create_jobs(specs, idempotency_key="bulk-1")] == [
        job.id for job in jobs
    ]


def test_iterating_jobs_follows_every_page_and_filters_by_status(client):
    created = client.create_jobs([JobSpec(f"job {n}", _later(n + 1)) for n in range(7)])
    cancelled = {client.cancel_job(created[n].id).id for n in (1, 4)}

    listed = list(client.iter_jobs(page_size=3))
    assert sorted(job.id for job in listed) == sorted(job.id for job in created)
    assert len({job.id for job in listed}) == 7
    assert {job.id for job in client.iter_jobs(status=["cancelled"], page_size=1)} == cancelled
    assert len(list(client.iter_jobs(status=["scheduled", "cancelled"]))) == 7
    assert list(client.iter_jobs(status=["failed"])) == []


def test_a_token_about_to_expire_is_refreshed_before_the_request(served_api, user):
    saved = []
    # Refreshing 2 h ahead of a 1 h token: every call finds it about to expire.
    client = Client(served_api, on_token=saved.append, refresh_before=timedelta(hours=2))
    first = client.login(username=user.username, password=DEFAULT_PASSWORD)

    client.create_job(message="after a refresh", execute_at=_later())

    assert len(saved) == 2
    assert saved[0] == first
    assert saved[1].token != first.token
    assert client.token == saved[1]


def test_errors_say_what_went_wrong(served_api, client, user):
    with pytest.raises(AuthError) as raised:
        Client(served_api).login(username=user.username, password="not the password")
    assert raised.value.code == "invalid_credentials"
    with pytest.raises(NotLoggedIn):
        Client(served_api).get_job("2ZZZZZZZZZZZZZZZZZZZZZZZZZZ")
    job = client.create_job(message="x", execute_at=_later())
    with pytest.raises(NotFound):
        client.get_job(job.id[:-1] + ("A" if job.id[-1] != "A" else "B"))


class RecordingTransport(UrllibTransport):
    """Real HTTP, remembering the status of every answer."""

    def __init__(self) -> None:
        super().__init__()
        self.statuses: list[int] = []

    def send(self, method, url, **kwargs):
        response = super().send(method, url, **kwargs)
        self.statuses.append(response.status)
        return response


def test_a_throttled_request_is_retried_after_the_api_allows_it(make_user):
    user = make_user()
    with serving_api(workers=1, env={"JOBSVC_LOGIN_THROTTLE_RATE": "1/s"}) as base:
        transport = RecordingTransport()
        client = Client(base, transport=transport)
        client.login(username=user.username, password=DEFAULT_PASSWORD)
        # Refreshes share the log-in throttle and are fast: the second comes within 1 s.
        tokens = [client.refresh() for _ in range(3)]

    assert 429 in transport.statuses
    assert transport.statuses[-1] == 200
    assert transport.statuses.count(200) == 4
    assert len({token.token for token in tokens}) == 3


# --- every other operation ----------------------------------------------------------------


def _stored(job_id: str):
    return Job.objects.using(shard_alias(shard_of(job_id)))


def _failed(client: Client, message: str = "failed", **fields) -> str:
    job = client.create_job(message=message, execute_at=_later(), **fields)
    _stored(job.id).filter(pk=job.id).update(status="failed", attempts=1)
    return job.id


def test_a_job_can_be_created_with_a_delay_and_a_priority(client):
    job = client.create_job(message="soon", delay_seconds=60, priority=7)

    assert job.priority == 7
    assert timedelta(seconds=50) < job.execute_at - datetime.now(UTC) <= timedelta(seconds=60)
    [bulk] = client.create_jobs([JobSpec("later", delay_seconds=30, priority=2)])
    assert bulk.priority == 2
    with pytest.raises(ValueError, match="exactly one"):
        client.create_job(message="when?")


def test_a_job_is_rescheduled_and_its_message_changed(client):
    job = client.create_job(message="draft", execute_at=_later(5))
    new_time = _later(30)

    moved = client.reschedule_job(job.id, execute_at=new_time, message="final")

    assert (moved.execute_at, moved.message) == (new_time, "final")
    delayed = client.reschedule_job(job.id, delay_seconds=3600)
    assert delayed.execute_at > new_time
    client.cancel_job(job.id)
    with pytest.raises(Conflict):
        client.reschedule_job(job.id, message="too late")


def test_a_failed_job_is_retried_with_new_attempts(client):
    job_id = _failed(client)

    retried = client.retry_job(job_id, extra_attempts=2)

    assert (retried.status, retried.max_attempts) == ("scheduled", 3)
    with pytest.raises(Conflict):
        client.retry_job(job_id)


def test_jobs_are_cancelled_and_retried_by_filter(client):
    kept = client.create_job(message="kept", execute_at=_later(), handler="default")
    failed = [_failed(client, f"failed {n}") for n in range(3)]

    assert client.retry_jobs(JobFilter(status=["failed"]), extra_attempts=1) == 3
    assert {job.status for job in map(client.get_job, failed)} == {"scheduled"}
    assert client.cancel_jobs(JobFilter(handler="default")) == 4
    assert client.get_job(kept.id).status == "cancelled"


def test_only_staff_redrive_every_users_failed_jobs(served_api, client, make_user):
    failed = _failed(client)
    staff = make_user(is_staff=True)
    staff_client = Client(served_api)
    staff_client.login(username=staff.username, password=DEFAULT_PASSWORD)

    with pytest.raises(Forbidden):
        client.redrive_jobs(JobFilter(status=["failed"]))
    assert staff_client.redrive_jobs(JobFilter(status=["failed"]), user_id=client.me().id) == 1
    assert client.get_job(failed).status == "scheduled"


def test_a_jobs_attempts_are_read_newest_first_page_by_page(client):
    job = client.create_job(message="ran", execute_at=_later())
    started = datetime.now(UTC) - timedelta(minutes=5)
    for number, outcome in enumerate(["retried", "timed_out", "succeeded"], start=1):
        JobAttempt.objects.using(shard_alias(shard_of(job.id))).create(
            job_id=job.id,
            attempt=number,
            started_at=started + timedelta(minutes=number),
            finished_at=started + timedelta(minutes=number, seconds=2),
            outcome=outcome,
            http_status=200 if outcome == "succeeded" else None,
            response_excerpt="thanks" if outcome == "succeeded" else "",
        )

    attempts = list(client.iter_attempts(job.id, page_size=2))

    assert [(a.attempt, a.outcome) for a in attempts] == [
        (3, "succeeded"),
        (2, "timed_out"),
        (1, "retried"),
    ]
    assert (attempts[0].http_status, attempts[0].response_excerpt) == (200, "thanks")
    assert attempts[0].duration_seconds == 2.0
    assert client.attempts_page(job.id, limit=1).next_cursor == "3"
    with pytest.raises(NotFound):
        client.attempts_page(job.id[:-1] + ("A" if job.id[-1] != "A" else "B"))


def test_the_account_says_who_the_caller_is_and_their_limits(client, user):
    account = client.me()

    assert (account.id, account.username, account.is_staff) == (user.pk, user.username, False)
    assert account.job_weight == user.job_weight
    assert {"max_unfinished_jobs", "create_rate_per_second", "create_burst_jobs"} <= set(
        account.limits
    )
    assert account.usage["unfinished_jobs"] == 0


def _routed(path: str) -> bool:
    try:
        resolve(path)
    except Resolver404:
        return False
    return True


needs_sec_api = pytest.mark.xfail(
    not (_routed("/api/v1/auth/logout") and _routed("/api/v1/me/password")),
    reason="needs sec-api",
    strict=False,
)


@needs_sec_api
def test_logging_out_revokes_the_token(served_api, client):
    token = client.token

    client.logout()

    assert client.token is None
    with pytest.raises(NotLoggedIn):
        client.me()
    with pytest.raises(AuthError):
        Client(served_api, token=token).me()


@needs_sec_api
def test_a_changed_password_is_the_one_that_logs_in(served_api, client, user):
    new_password = "an entirely new passphrase 43"

    client.change_password(current_password=DEFAULT_PASSWORD, new_password=new_password)

    Client(served_api).login(username=user.username, password=new_password)
    with pytest.raises(AuthError):
        Client(served_api).login(username=user.username, password=DEFAULT_PASSWORD)
