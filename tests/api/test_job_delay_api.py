"""/api/v1/me/jobs with delay_seconds: due that long after the request, instead of execute_at."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from tests.api.support import create_job, error_of, job_body, job_count, post_jobs

pytestmark = pytest.mark.django_db(databases="__all__")


def test_a_job_with_a_delay_is_due_that_long_after_the_request(user_client):
    before = timezone.now()

    job = create_job(user_client, {"message": "m", "delay_seconds": 90})

    execute_at = datetime.fromisoformat(job["execute_at"])
    assert before + timedelta(seconds=90) <= execute_at <= timezone.now() + timedelta(seconds=90)
    assert job["due_at"] == job["execute_at"]
    assert job["status"] == "scheduled"


def test_a_delay_of_zero_is_due_now(user_client):
    job = create_job(user_client, {"message": "m", "delay_seconds": 0})

    assert datetime.fromisoformat(job["execute_at"]) <= timezone.now()


def test_a_bulk_may_mix_delays_and_times(user_client):
    response = post_jobs(user_client, [job_body("at"), {"message": "in", "delay_seconds": 5}])

    assert response.status_code == 201
    assert [job["message"] for job in response.json()["data"]] == ["at", "in"]


def test_execute_at_and_delay_seconds_together_are_refused(user_client, user):
    body = job_body() | {"delay_seconds": 5}

    error = error_of(post_jobs(user_client, body), 400, "invalid")

    assert error["message"] == "delay_seconds: Give execute_at or delay_seconds, not both."
    assert job_count(user.pk) == 0


def test_neither_execute_at_nor_delay_seconds_is_refused(user_client):
    error = error_of(post_jobs(user_client, {"message": "m"}), 400, "invalid")

    assert list(error["fields"]) == ["execute_at"]
    assert "delay_seconds" in error["message"]


@pytest.mark.parametrize("delay", [-1, "60", True, [], 366 * 86400])
def test_an_unusable_delay_is_refused(user_client, user, delay):
    response = post_jobs(user_client, {"message": "m", "delay_seconds": delay})

    error = error_of(response, 400, "invalid")
    assert list(error["fields"]) == ["delay_seconds"]
    assert job_count(user.pk) == 0


def test_a_retry_of_a_delayed_create_replays_the_first_job(user_client, user):
    body = {"message": "m", "delay_seconds": 30}
    first = create_job(user_client, body, key="delayed")

    retry = post_jobs(user_client, body, key="delayed")

    assert retry.status_code == 201
    assert retry.json()["data"]["id"] == first["id"]
    assert retry.json()["data"]["execute_at"] == first["execute_at"]
    assert job_count(user.pk) == 1


def test_a_retry_with_another_delay_is_unprocessable(user_client, user):
    create_job(user_client, {"message": "m", "delay_seconds": 30}, key="delayed")

    response = post_jobs(user_client, {"message": "m", "delay_seconds": 31}, key="delayed")

    error_of(response, 422, "idempotency_key_reused")
    assert job_count(user.pk) == 1
