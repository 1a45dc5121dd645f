"""POST /api/v1/me/jobs/{id}/reschedule: a new time and/or message for a job not yet dispatched."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from jobsvc.jobs.models import Job
from jobsvc.sharding.ids import new_job_id, shard_of
from jobsvc.sharding.shards import shard_alias
from tests.api.support import (
    create_job,
    error_of,
    job_body,
    job_url,
    reschedule_url,
    stored_job,
)

pytestmark = pytest.mark.django_db(databases="__all__")


def reschedule(client, job_id: str, body):
    return client.post(reschedule_url(job_id), body, format="json")


def in_hours(hours: float) -> datetime:
    return timezone.now() + timedelta(hours=hours)


def test_a_scheduled_job_moves_to_the_new_time(user_client):
    job = create_job(user_client)
    new_time = in_hours(5)

    response = reschedule(user_client, job["id"], {"execute_at": new_time.isoformat()})

    assert response.status_code == 200
    moved = response.json()["data"]
    assert datetime.fromisoformat(moved["execute_at"]) == new_time
    assert moved["due_at"] == moved["execute_at"]
    assert moved["status"] == "scheduled"
    assert moved["message"] == job["message"]
    assert stored_job(job["id"]).due_at == new_time
    assert user_client.get(job_url(job["id"])).json()["data"] == moved


def test_a_delay_moves_the_job_that_long_from_now(user_client):
    job = create_job(user_client)
    before = timezone.now()

    moved = reschedule(user_client, job["id"], {"delay_seconds": 60}).json()["data"]

    due = datetime.fromisoformat(moved["due_at"])
    assert before + timedelta(seconds=60) <= due <= timezone.now() + timedelta(seconds=60)


def test_the_message_changes_alone_or_with_the_time(user_client):
    job = create_job(user_client)

    alone = reschedule(user_client, job["id"], {"message": "new words"}).json()["data"]
    both = reschedule(
        user_client, job["id"], {"message": "newer", "execute_at": in_hours(2).isoformat()}
    ).json()["data"]

    assert (alone["message"], alone["execute_at"]) == ("new words", job["execute_at"])
    assert both["message"] == "newer"
    assert both["execute_at"] != job["execute_at"]


@pytest.mark.parametrize("status", ["queued", "running", "succeeded", "failed", "cancelled"])
def test_a_job_past_scheduled_is_a_409_and_unchanged(user_client, status):
    job = create_job(user_client)
    Job.objects.using(shard_alias(shard_of(job["id"]))).filter(pk=job["id"]).update(status=status)

    response = reschedule(user_client, job["id"], {"execute_at": in_hours(3).isoformat()})

    error = error_of(response, 409, "job_not_reschedulable")
    assert status in error["message"]
    assert stored_job(job["id"]).execute_at == datetime.fromisoformat(job["execute_at"])


def test_a_job_waiting_for_its_retry_has_started_and_is_a_409(user_client):
    job = create_job(user_client)
    Job.objects.using(shard_alias(shard_of(job["id"]))).filter(pk=job["id"]).update(attempts=1)

    error = error_of(reschedule(user_client, job["id"], {"message": "x"}), 409)

    assert "attempt" in error["message"]
    assert stored_job(job["id"]).message == job["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "non_field_errors"),
        ([], "non_field_errors"),
        ({"execute_at": None}, "non_field_errors"),
        ({"execute_at": "2030-01-01T00:00:00"}, "execute_at"),
        ({"execute_at": "3030-01-01T00:00:00Z"}, "execute_at"),
        ({"delay_seconds": -5}, "delay_seconds"),
        ({"delay_seconds": 5, "execute_at": "2030-01-01T00:00:00Z"}, "delay_seconds"),
        ({"message": 12}, "message"),
        ({"message": "nul\x00"}, "message"),
        ({"message": "m", "handler": "http"}, "handler"),
    ],
)
def test_an_unusable_body_is_a_400_and_changes_nothing(user_client, body, field):
    job = create_job(user_client, job_body("kept"))

    error = error_of(reschedule(user_client, job["id"], body), 400, "invalid")

    assert field in error["fields"]
    kept = stored_job(job["id"])
    assert (kept.message, kept.execute_at) == ("kept", datetime.fromisoformat(job["execute_at"]))


def test_a_missing_job_is_404_and_a_malformed_id_400(user_client):
    missing = new_job_id(shard_id=0, at=timezone.now())

    error_of(reschedule(user_client, missing, {"message": "m"}), 404, "job_not_found")
    error_of(reschedule(user_client, "not-an-id", {"message": "m"}), 400)
