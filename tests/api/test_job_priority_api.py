"""/api/v1/me/jobs with priority: which of the user's own due jobs runs first."""

from __future__ import annotations

import pytest

from tests.api.support import create_job, error_of, job_body, job_count, post_jobs, stored_job

pytestmark = pytest.mark.django_db(databases="__all__")


def test_a_job_without_a_priority_gets_the_middle_one(user_client):
    job = create_job(user_client)

    assert job["priority"] == 5
    assert stored_job(job["id"]).priority == 5


@pytest.mark.parametrize("priority", [1, 9])
def test_a_priority_in_range_is_stored_and_returned(user_client, priority):
    job = create_job(user_client, job_body() | {"priority": priority})

    assert job["priority"] == priority
    assert stored_job(job["id"]).priority == priority
    assert user_client.get(f"/api/v1/me/jobs/{job['id']}").json()["data"]["priority"] == priority


def test_a_bulk_carries_each_jobs_priority(user_client):
    response = post_jobs(user_client, [job_body() | {"priority": 9}, job_body()])

    assert [job["priority"] for job in response.json()["data"]] == [9, 5]


@pytest.mark.parametrize("priority", [0, 10, -1, 5.5, "9", True, []])
def test_a_priority_out_of_range_is_a_400(user_client, user, priority):
    error = error_of(post_jobs(user_client, job_body() | {"priority": priority}), 400, "invalid")

    assert list(error["fields"]) == ["priority"]
    assert job_count(user.pk) == 0


def test_a_retry_with_another_priority_is_unprocessable(user_client, user):
    body = job_body()
    create_job(user_client, body, key="prio")

    response = post_jobs(user_client, body | {"priority": 9}, key="prio")

    error_of(response, 422, "idempotency_key_reused")
    assert job_count(user.pk) == 1
