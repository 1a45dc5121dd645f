"""A user never sees or changes another user's jobs, through any endpoint."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobsvc.jobs.models import Job
from jobsvc.sharding.ids import shard_of
from jobsvc.sharding.shards import shard_alias, shard_count
from tests.api.support import (
    BULK_CANCEL_URL,
    JOBS_URL,
    REDRIVE_URL,
    RETRY_MANY_URL,
    cancel_url,
    create_job,
    create_jobs,
    error_of,
    insert_job,
    job_body,
    job_count,
    job_url,
    jobs_of,
    post_jobs,
    reschedule_url,
    retry_url,
    stored_job,
)

pytestmark = pytest.mark.django_db(databases="__all__")


@pytest.fixture
def theirs(other_client, other_user) -> list[str]:
    """Ids of the other user's jobs: the first made through the API, then one per status."""
    ids = [create_job(other_client, job_body("not yours"))["id"]]
    for n, status in enumerate(["scheduled", "running", "cancelled", "succeeded"]):
        ids.append(insert_job(user_id=other_user.pk, shard_id=n % shard_count(), status=status).id)
    return ids


def test_get_of_another_users_job_is_not_found(user_client, theirs):
    response = user_client.get(job_url(theirs[0]))

    error_of(response, 404, "job_not_found")
    assert "not yours" not in response.content.decode()


def test_cancel_of_another_users_job_is_not_found_and_changes_nothing(user_client, theirs):
    error_of(user_client.post(cancel_url(theirs[0])), 404, "job_not_found")

    assert stored_job(theirs[0]).status == "scheduled"


def test_the_list_shows_only_the_callers_jobs(user_client, theirs):
    mine = create_job(user_client)

    body = user_client.get(JOBS_URL).json()

    assert [job["id"] for job in body["data"]] == [mine["id"]]
    assert body["pagination"]["next_cursor"] is None


@pytest.mark.parametrize("status", ["scheduled", "running", "cancelled", "succeeded"])
def test_a_status_filter_shows_none_of_another_users_jobs(user_client, theirs, status):
    assert user_client.get(JOBS_URL, {"status": status}).json()["data"] == []


def test_a_cursor_from_another_users_job_pages_only_the_callers_jobs(user_client, user, theirs):
    mine = insert_job(user_id=user.pk, shard_id=0, created_at=timezone.now() - timedelta(hours=1))

    body = user_client.get(JOBS_URL, {"cursor": max(theirs)}).json()

    assert [job["id"] for job in body["data"]] == [mine.id]


def test_the_same_idempotency_key_makes_independent_jobs_for_two_users(
    user_client, other_client, user, other_user
):
    mine = create_job(user_client, job_body("mine"), key="shared-key")

    response = post_jobs(other_client, job_body("theirs"), key="shared-key")

    assert response.status_code == 201
    theirs = response.json()["data"]
    assert theirs["id"] != mine["id"]
    assert (mine["user_id"], theirs["user_id"]) == (user.pk, other_user.pk)
    assert (mine["message"], theirs["message"]) == ("mine", "theirs")
    assert job_count(user.pk) == job_count(other_user.pk) == 1


def test_a_replay_never_returns_another_users_job(user_client, other_client):
    body = job_body("same body")
    theirs = create_job(other_client, body, key="same-key")

    mine = post_jobs(user_client, body, key="same-key")

    assert mine.status_code == 201
    assert mine.json()["data"]["id"] != theirs["id"]
    assert "Idempotent-Replayed" not in mine


def test_another_users_jobs_are_untouched_by_the_callers_writes(user_client, other_user, theirs):
    before = {job.id: (job.status, job.updated_at) for job in jobs_of(other_user.pk)}

    mine = create_job(user_client)
    user_client.post(cancel_url(mine["id"]))
    create_jobs(user_client, [job_body(), job_body()])

    assert {job.id: (job.status, job.updated_at) for job in jobs_of(other_user.pk)} == before


def _untouched(other_user_id: int):
    return {job.id: (job.status, job.updated_at) for job in jobs_of(other_user_id)}


def test_a_bulk_cancel_never_touches_another_users_jobs(user_client, other_user, theirs):
    before = _untouched(other_user.pk)

    response = user_client.post(BULK_CANCEL_URL, {"status": ["scheduled", "queued"]}, format="json")

    assert response.json()["data"] == {"cancelled": 0}
    assert _untouched(other_user.pk) == before


def test_a_reschedule_of_another_users_job_is_not_found_and_changes_nothing(
    user_client, other_user, theirs
):
    before = _untouched(other_user.pk)
    body = {"message": "hijacked", "delay_seconds": 1}

    for job_id in theirs:
        response = user_client.post(reschedule_url(job_id), body, format="json")
        error = error_of(response, 404, "job_not_found")
        assert "not yours" not in error["message"]

    assert _untouched(other_user.pk) == before


def test_a_retry_of_another_users_job_is_not_found_and_changes_nothing(
    user_client, other_user, theirs
):
    Job.objects.using(shard_alias(shard_of(theirs[0]))).filter(pk=theirs[0]).update(status="failed")
    before = _untouched(other_user.pk)

    for job_id in theirs:
        error_of(user_client.post(retry_url(job_id)), 404, "job_not_found")

    assert _untouched(other_user.pk) == before


def test_a_bulk_retry_never_touches_another_users_jobs(user_client, other_user, theirs):
    Job.objects.using(shard_alias(shard_of(theirs[0]))).filter(pk=theirs[0]).update(status="failed")
    before = _untouched(other_user.pk)

    response = user_client.post(RETRY_MANY_URL, {"status": ["failed"]}, format="json")

    assert response.json()["data"] == {"retried": 0}
    assert _untouched(other_user.pk) == before


def test_the_redrive_of_every_user_is_refused_to_a_user(user_client, other_user, theirs):
    Job.objects.using(shard_alias(shard_of(theirs[0]))).filter(pk=theirs[0]).update(status="failed")
    before = _untouched(other_user.pk)

    response = user_client.post(REDRIVE_URL, {"user_id": other_user.pk}, format="json")

    error_of(response, 403, "staff_only")
    assert _untouched(other_user.pk) == before
