"""GET /api/v1/me/jobs/{id}/attempts: a job's delivery log, newest first, its owner's only."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobsvc.jobs.models import Job, JobAttempt
from jobsvc.sharding.ids import shard_of
from jobsvc.sharding.shards import shard_alias
from tests.api.support import create_job, error_of, job_url

pytestmark = pytest.mark.django_db(databases="__all__")


def attempts_url(job_id: str) -> str:
    return f"{job_url(job_id)}/attempts"


def _alias(job_id: str) -> str:
    return shard_alias(shard_of(job_id))


def _ran(job_id: str, *outcomes: tuple[str, dict]) -> None:
    """Record finished attempts 1, 2, ... as the executor would have."""
    start = timezone.now() - timedelta(minutes=10)
    for number, (outcome, fields) in enumerate(outcomes, start=1):
        began = start + timedelta(minutes=number)
        JobAttempt.objects.using(_alias(job_id)).create(
            job_id=job_id,
            attempt=number,
            started_at=began,
            finished_at=began + timedelta(seconds=1.5),
            outcome=outcome,
            **fields,
        )
    Job.objects.using(_alias(job_id)).filter(pk=job_id).update(attempts=len(outcomes))


def _page(client, job_id: str, **params) -> dict:
    response = client.get(attempts_url(job_id), params)
    assert response.status_code == 200, response.content
    return response.json()


def test_every_attempt_is_listed_newest_first_with_what_the_receiver_answered(user_client):
    job = create_job(user_client)
    _ran(
        job["id"],
        ("retried", {"error": "RetryableError: 503", "http_status": 503, "response_excerpt": "x"}),
        ("timed_out", {"error": "HandlerTimeout: no answer in time"}),
        ("succeeded", {"http_status": 200, "response_excerpt": '{"ok": true}'}),
    )

    body = _page(user_client, job["id"])

    assert [a["attempt"] for a in body["data"]] == [3, 2, 1]
    latest = body["data"][0]
    assert latest["outcome"] == "succeeded"
    assert (latest["http_status"], latest["response_excerpt"], latest["error"]) == (
        200,
        '{"ok": true}',
        None,
    )
    assert latest["duration_seconds"] == 1.5
    assert latest["started_at"].endswith("Z") and latest["finished_at"].endswith("Z")
    assert body["data"][1]["outcome"] == "timed_out"
    assert body["data"][1]["http_status"] is None
    assert body["data"][2]["error"] == "RetryableError: 503"
    assert body["pagination"] == {"next_cursor": None}


def test_a_job_that_never_ran_has_no_attempts(user_client):
    job = create_job(user_client)

    assert _page(user_client, job["id"]) == {
        "data": [],
        "success": True,
        "pagination": {"next_cursor": None},
    }


def test_attempts_are_paged_with_a_cursor(user_client):
    job = create_job(user_client)
    _ran(job["id"], *[("retried", {"error": f"try {n}"}) for n in range(5)])

    first = _page(user_client, job["id"], limit=2)
    second = _page(user_client, job["id"], limit=2, cursor=first["pagination"]["next_cursor"])
    third = _page(user_client, job["id"], limit=2, cursor=second["pagination"]["next_cursor"])

    pages = [[a["attempt"] for a in page["data"]] for page in (first, second, third)]
    assert pages == [[5, 4], [3, 2], [1]]
    assert third["pagination"]["next_cursor"] is None


def test_a_running_jobs_current_attempt_comes_first_unfinished(user_client):
    job = create_job(user_client)
    _ran(job["id"], ("lost", {"error": "the executor running this attempt stopped responding"}))
    started = timezone.now()
    Job.objects.using(_alias(job["id"])).filter(pk=job["id"]).update(
        status="running", attempts=2, started_at=started
    )

    data = _page(user_client, job["id"])["data"]

    assert [(a["attempt"], a["outcome"]) for a in data] == [(2, "running"), (1, "lost")]
    assert (data[0]["finished_at"], data[0]["duration_seconds"]) == (None, None)
    assert data[0]["started_at"] is not None
    assert [a["attempt"] for a in _page(user_client, job["id"], limit=1)["data"]] == [2]


def test_another_users_job_is_not_found(user_client, other_client):
    theirs = create_job(other_client)
    _ran(theirs["id"], ("succeeded", {}))

    error_of(user_client.get(attempts_url(theirs["id"])), 404, "job_not_found")


@pytest.mark.parametrize("cursor", ["0", "-1", "x", "100000", "1.5", "٣", "07"])
def test_a_cursor_the_api_did_not_give_is_a_400(user_client, cursor):
    job = create_job(user_client)

    error = error_of(user_client.get(attempts_url(job["id"]), {"cursor": cursor}), 400, "invalid")

    assert list(error["fields"]) == ["cursor"]


def test_a_malformed_job_id_is_a_400(user_client):
    error_of(user_client.get(attempts_url("not-a-job-id")), 400, "invalid")


def test_attempts_need_a_token(api_client, user_client):
    job = create_job(user_client)

    error_of(api_client.get(attempts_url(job["id"])), 401)


def test_attempts_are_in_the_schema(api_client):
    schema = api_client.get("/api/v1/schema/?format=json").json()

    operation = schema["paths"]["/api/v1/me/jobs/{job_id}/attempts"]["get"]
    assert operation["operationId"] == "jobs_attempts"
    assert {"cursor", "limit", "job_id"} <= {p["name"] for p in operation["parameters"]}
