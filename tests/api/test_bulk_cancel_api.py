"""POST /api/v1/me/jobs/cancel: cancel the caller's jobs that match a filter, on every shard."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobsvc.sharding.shards import shard_count
from tests.api.support import (
    BULK_CANCEL_URL,
    create_job,
    error_of,
    insert_job,
    job_body,
    jobs_of,
    stored_job,
)

pytestmark = pytest.mark.django_db(databases="__all__")


def cancel_many(client, body):
    return client.post(BULK_CANCEL_URL, body, format="json")


@pytest.fixture
def jobs_by_status(user) -> dict[str, str]:
    """One of the user's jobs in each status, spread over the shards."""
    statuses = ["scheduled", "queued", "running", "succeeded", "failed", "cancelled"]
    return {
        status: insert_job(user_id=user.pk, shard_id=n % shard_count(), status=status).id
        for n, status in enumerate(statuses)
    }


def test_every_job_that_has_not_started_is_cancelled_on_every_shard(user_client, user):
    ids = [insert_job(user_id=user.pk, shard_id=shard_id).id for shard_id in range(shard_count())]

    response = cancel_many(user_client, {"status": ["scheduled"]})

    assert response.status_code == 200
    assert response.json() == {"data": {"cancelled": len(ids)}, "success": True}
    assert {stored_job(job_id).status for job_id in ids} == {"cancelled"}
    assert all(stored_job(job_id).finished_at is not None for job_id in ids)


def test_jobs_that_started_or_finished_are_left_as_they_are(user_client, jobs_by_status):
    response = cancel_many(user_client, {"status": ["scheduled", "queued"]})

    assert response.json()["data"] == {"cancelled": 2}
    assert {status: stored_job(job_id).status for status, job_id in jobs_by_status.items()} == {
        "scheduled": "cancelled",
        "queued": "cancelled",
        "running": "running",
        "succeeded": "succeeded",
        "failed": "failed",
        "cancelled": "cancelled",
    }


def test_a_status_filter_cancels_only_that_status(user_client, jobs_by_status):
    response = cancel_many(user_client, {"status": ["queued"]})

    assert response.json()["data"] == {"cancelled": 1}
    assert stored_job(jobs_by_status["queued"]).status == "cancelled"
    assert stored_job(jobs_by_status["scheduled"]).status == "scheduled"


def test_an_execute_at_window_cancels_only_the_jobs_due_in_it(user_client, user):
    now = timezone.now()
    due = {hours: now + timedelta(hours=hours) for hours in (1, 2, 3)}
    ids = {
        hours: insert_job(user_id=user.pk, shard_id=hours % shard_count(), execute_at=at).id
        for hours, at in due.items()
    }

    response = cancel_many(
        user_client,
        {"execute_at_from": due[2].isoformat(), "execute_at_to": due[3].isoformat()},
    )

    assert response.json()["data"] == {"cancelled": 1}
    assert {hours: stored_job(job_id).status for hours, job_id in ids.items()} == {
        1: "scheduled",
        2: "cancelled",
        3: "scheduled",
    }


def test_a_handler_filter_cancels_only_that_handlers_jobs(user_client, user, settings):
    settings.KAFKA_HANDLER_ALLOWED_TOPICS = ["events"]
    user.kafka_topics = ["events"]  # staff granted it
    user.save()
    from jobsvc.handlers.setup import validation_registry

    validation_registry.cache_clear()
    try:
        kafka = create_job(
            user_client, job_body() | {"handler": "kafka", "handler_params": {"topic": "events"}}
        )
    finally:
        validation_registry.cache_clear()
    default = create_job(user_client, job_body())

    response = cancel_many(user_client, {"handler": "kafka"})

    assert response.json()["data"] == {"cancelled": 1}
    assert stored_job(kafka["id"]).status == "cancelled"
    assert stored_job(default["id"]).status == "scheduled"


@pytest.mark.parametrize("handler", ["\u001f", " default"])
def test_a_handler_name_is_matched_exactly_not_trimmed(user_client, handler):
    """What the schema allows (a non-empty string) is answered, and matches no job."""
    job = create_job(user_client, job_body())

    response = cancel_many(user_client, {"handler": handler})

    assert response.json()["data"] == {"cancelled": 0}
    assert stored_job(job["id"]).status == "scheduled"


def test_cancelling_again_cancels_nothing_more(user_client, user):
    insert_job(user_id=user.pk, shard_id=0)
    cancel_many(user_client, {"status": ["scheduled"]})

    response = cancel_many(user_client, {"status": ["scheduled"]})

    assert response.json()["data"] == {"cancelled": 0}


def test_more_jobs_than_one_batch_are_all_cancelled(user_client, user, monkeypatch):
    monkeypatch.setattr("jobsvc.jobs.changes.BULK_BATCH_SIZE", 3)
    ids = [create_job(user_client)["id"] for _ in range(8)]

    response = cancel_many(user_client, {"status": ["scheduled"]})

    assert response.json()["data"] == {"cancelled": 8}
    assert {stored_job(job_id).status for job_id in ids} == {"cancelled"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "non_field_errors"),
        ([], "non_field_errors"),
        ("scheduled", "non_field_errors"),
        ({"status": ["running"]}, "status"),
        ({"status": ["nonsense"]}, "status"),
        ({"status": []}, "status"),
        ({"status": "scheduled"}, "status"),
        ({"execute_at_from": "2030-01-01T00:00:00"}, "execute_at_from"),
        ({"execute_at_to": "tomorrow"}, "execute_at_to"),
        (
            {"execute_at_from": "2030-01-02T00:00:00Z", "execute_at_to": "2030-01-01T00:00:00Z"},
            "execute_at_to",
        ),
        ({"handler": "http", "stauts": ["queued"]}, "stauts"),
        ({"handler": 12}, "handler"),
        ({"handler": "h" * 65}, "handler"),
    ],
)
def test_an_unusable_filter_is_a_400_and_cancels_nothing(user_client, user, body, field):
    job = insert_job(user_id=user.pk, shard_id=0)

    error = error_of(cancel_many(user_client, body), 400, "invalid")

    assert field in error["fields"] or field == "non_field_errors", error
    assert stored_job(job.id).status == "scheduled"


def test_without_a_token_nothing_is_cancelled(client, user):
    job = insert_job(user_id=user.pk, shard_id=0)

    error_of(client.post(BULK_CANCEL_URL, {"status": ["scheduled"]}, format="json"), 401)

    assert [j.status for j in jobs_of(user.pk)] == ["scheduled"]
    assert stored_job(job.id).status == "scheduled"
