"""Retrying failed jobs: one (/me/jobs/{id}/retry), by filter (/me/jobs/retry), and the
staff redrive of every user's dead-lettered jobs (/jobs/redrive, and the admin action)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from jobsvc.jobs.models import Job
from jobsvc.sharding.ids import new_job_id, shard_of
from jobsvc.sharding.shards import shard_alias, shard_count
from tests.api.support import (
    REDRIVE_URL,
    RETRY_MANY_URL,
    error_of,
    insert_job,
    retry_url,
    stored_job,
)

pytestmark = pytest.mark.django_db(databases="__all__")

HISTORY = [
    {"attempt": 1, "error": "503 from receiver", "at": "2030-01-01T00:00:00Z"},
    {"attempt": 2, "error": "timed out", "at": "2030-01-01T00:00:02Z"},
]


def failed_job(user_id: int, *, shard_id: int = 0, **changes) -> str:
    """A job that used its 2 attempts and failed, with its attempt history."""
    job = insert_job(user_id=user_id, shard_id=shard_id)
    now = timezone.now()
    fields = {
        "status": "failed",
        "attempts": 2,
        "max_attempts": 2,
        "last_error": "timed out",
        "attempt_errors": HISTORY,
        "dispatched_at": now,
        "started_at": now,
        "finished_at": now,
    }
    Job.objects.using(shard_alias(shard_id)).filter(pk=job.id).update(**(fields | changes))
    return job.id


def test_a_failed_job_is_scheduled_again_with_new_attempts_and_its_history(user_client, user):
    job_id = failed_job(user.pk)
    before = timezone.now()

    response = user_client.post(retry_url(job_id), {"extra_attempts": 4}, format="json")

    assert response.status_code == 200
    job = response.json()["data"]
    assert job["id"] == job_id
    assert (job["status"], job["attempts"], job["max_attempts"]) == ("scheduled", 2, 6)
    assert job["attempt_errors"] == HISTORY
    assert job["last_error"] == "timed out"
    assert job["finished_at"] is None
    stored = stored_job(job_id)
    assert before <= stored.due_at <= timezone.now()


def test_without_a_body_a_retry_gets_the_default_attempts(user_client, user):
    job_id = failed_job(user.pk)

    job = user_client.post(retry_url(job_id)).json()["data"]

    assert job["max_attempts"] == 2 + settings.JOB_DEFAULT_MAX_ATTEMPTS


@pytest.mark.parametrize("status", ["scheduled", "queued", "running", "succeeded", "cancelled"])
def test_only_a_failed_job_can_be_retried(user_client, user, status):
    job = insert_job(user_id=user.pk, shard_id=1, status=status)

    error = error_of(user_client.post(retry_url(job.id)), 409, "job_not_retryable")

    assert status in error["message"]
    assert stored_job(job.id).status == status


def test_a_retried_job_cannot_be_retried_again_until_it_fails(user_client, user):
    job_id = failed_job(user.pk)
    user_client.post(retry_url(job_id))

    error_of(user_client.post(retry_url(job_id)), 409, "job_not_retryable")

    assert stored_job(job_id).max_attempts == 2 + settings.JOB_DEFAULT_MAX_ATTEMPTS


@pytest.mark.parametrize("extra", [0, -1, 26, "3", 2.5, True, None, []])
def test_an_unusable_attempt_count_is_a_400(user_client, user, extra):
    job_id = failed_job(user.pk)

    error = error_of(
        user_client.post(retry_url(job_id), {"extra_attempts": extra}, format="json"), 400
    )

    assert list(error["fields"]) == ["extra_attempts"]
    assert stored_job(job_id).status == "failed"


def test_retrying_a_missing_job_is_404_and_a_malformed_id_400(user_client):
    error_of(user_client.post(retry_url(new_job_id(shard_id=0, at=timezone.now()))), 404)
    error_of(user_client.post(retry_url("nope")), 400)


# --- by filter --------------------------------------------------------------------------


def test_a_bulk_retry_retries_the_failed_jobs_on_every_shard(user_client, user):
    failed = [failed_job(user.pk, shard_id=shard_id) for shard_id in range(shard_count())]
    other = insert_job(user_id=user.pk, shard_id=0, status="succeeded")

    response = user_client.post(RETRY_MANY_URL, {"status": ["failed"]}, format="json")

    assert response.json() == {"data": {"retried": len(failed)}, "success": True}
    assert {stored_job(job_id).status for job_id in failed} == {"scheduled"}
    assert stored_job(other.id).status == "succeeded"


def test_a_bulk_retry_by_handler_and_window(user_client, user):
    now = timezone.now()
    early = failed_job(user.pk, execute_at=now - timedelta(hours=3))
    late = failed_job(user.pk, execute_at=now - timedelta(hours=1))
    other_handler = failed_job(user.pk, execute_at=now - timedelta(hours=1), handler="kafka")

    response = user_client.post(
        RETRY_MANY_URL,
        {
            "execute_at_from": (now - timedelta(hours=2)).isoformat(),
            "handler": "default",
            "extra_attempts": 1,
        },
        format="json",
    )

    assert response.json()["data"] == {"retried": 1}
    assert [stored_job(job_id).status for job_id in (early, late, other_handler)] == [
        "failed",
        "scheduled",
        "failed",
    ]
    assert stored_job(late).max_attempts == 3


@pytest.mark.parametrize(
    "body",
    [{}, {"extra_attempts": 2}, {"status": ["scheduled"]}, {"status": ["failed"], "stauts": 1}],
)
def test_a_bulk_retry_needs_a_filter_of_failed_jobs(user_client, user, body):
    job_id = failed_job(user.pk)

    error_of(user_client.post(RETRY_MANY_URL, body, format="json"), 400, "invalid")

    assert stored_job(job_id).status == "failed"


# --- staff redrive ----------------------------------------------------------------------


def test_staff_redrive_retries_every_users_failed_jobs(staff_client, user, other_user):
    ids = [failed_job(user.pk, shard_id=0), failed_job(other_user.pk, shard_id=1)]

    response = staff_client.post(REDRIVE_URL, {"status": ["failed"]}, format="json")

    assert response.status_code == 200
    assert response.json()["data"]["retried"] >= 2  # the shards may hold other tests' jobs
    assert {stored_job(job_id).status for job_id in ids} == {"scheduled"}


def test_staff_redrive_of_one_user_leaves_the_others(staff_client, user, other_user):
    mine, theirs = failed_job(user.pk, shard_id=0), failed_job(other_user.pk, shard_id=0)

    response = staff_client.post(REDRIVE_URL, {"user_id": user.pk}, format="json")

    assert response.json()["data"] == {"retried": 1}
    assert (stored_job(mine).status, stored_job(theirs).status) == ("scheduled", "failed")


def test_redrive_is_forbidden_to_a_user_who_is_not_staff(user_client, other_user):
    theirs = failed_job(other_user.pk)

    error_of(user_client.post(REDRIVE_URL, {"status": ["failed"]}, format="json"), 403)

    assert stored_job(theirs).status == "failed"


@pytest.mark.parametrize("body", [{}, {"user_id": "7"}, {"user_id": 0}, {"status": ["running"]}])
def test_an_unusable_redrive_is_a_400(staff_client, body):
    error_of(staff_client.post(REDRIVE_URL, body, format="json"), 400, "invalid")


def test_the_admin_redrive_action_retries_a_failed_job(make_user, user):
    superuser = make_user(is_staff=True)
    superuser.is_superuser = True
    superuser.save()
    admin = Client()
    admin.force_login(superuser)
    failed = failed_job(user.pk, shard_id=0)
    running = insert_job(user_id=user.pk, shard_id=0, status="running").id

    response = admin.post(
        "/admin/jobs/job/?shard=0",
        {"action": "redrive_jobs", "_selected_action": [failed, running], "index": "0"},
        follow=True,
    )

    assert response.status_code == 200
    assert "Redrove 1 failed job(s); 1 had not failed." in response.content.decode()
    assert (stored_job(failed).status, stored_job(running).status) == ("scheduled", "running")
    assert shard_of(failed) == 0
