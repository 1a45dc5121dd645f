"""The client against the API served by gunicorn: every operation, over real HTTP."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobsvc_client import AuthError, Client, Conflict, JobSpec, NotFound, NotLoggedIn
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
    with pytest.raises(Conflict) as raised:
        client.create_job(message="other", execute_at=execute_at, idempotency_key="k-1")
    assert raised.value.status == 409


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
