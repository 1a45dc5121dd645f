"""A failed job retried through the API runs again, as its next attempt, through the real
scheduler and executor, and keeps its id and its attempt history."""

from __future__ import annotations

import pytest

from tests.e2e.jobs import all_jobs, create, spec
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

RUN_TIMEOUT = 30.0  # seconds for the workers to start and take a job through its attempts


def status_of(job_id: str) -> str:
    return all_jobs(pk=job_id)[0].status


def test_a_retried_failed_job_runs_its_next_attempt_and_succeeds(
    make_user, start_worker, receiver, client_for
):
    user = make_user()
    [job_id] = create(user.pk, [spec(handler="http", params={"url": receiver.url}, max_attempts=2)])
    receiver.answer(job_id, 500, 500)  # both attempts fail; the next delivery gets 200
    start_worker("scheduler", "scheduler-a")
    start_worker("executor", "executor-a")
    wait_until(lambda: status_of(job_id) == "failed", timeout=RUN_TIMEOUT, what="job failed")

    response = client_for(user).post(
        f"/api/v1/me/jobs/{job_id}/retry", {"extra_attempts": 1}, format="json"
    )

    assert response.status_code == 200
    wait_until(lambda: status_of(job_id) == "succeeded", timeout=RUN_TIMEOUT, what="job re-ran")
    deliveries = receiver.of(job_id)
    assert [delivery.attempt for delivery in deliveries] == [1, 2, 3]
    assert {delivery.idempotency_key for delivery in deliveries} == {job_id}  # one per job
    done = all_jobs(pk=job_id)[0]
    assert (done.attempts, done.max_attempts) == (3, 3)
    assert [entry["attempt"] for entry in done.attempt_errors] == [1, 2]
