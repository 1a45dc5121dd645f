"""A job goes from the API's store through a scheduler and an executor to succeeded."""

from __future__ import annotations

import pytest

from tests.e2e.jobs import all_jobs, create, due_in, spec, status_counts
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)


def test_due_jobs_run_once_and_succeed(make_user, start_worker):
    user = make_user()
    ids = create(user.pk, [spec(due=due_in(0.5)) for _ in range(50)])
    start_worker("scheduler", "scheduler-a")
    start_worker("executor", "executor-a")

    wait_until(
        lambda: status_counts()["succeeded"] == len(ids), timeout=30, what="every job succeeded"
    )

    jobs = all_jobs()
    assert {job.attempts for job in jobs} == {1}
    assert all(job.dispatched_at >= job.execute_at for job in jobs)
    assert all(job.finished_at >= job.started_at >= job.dispatched_at for job in jobs)


def test_a_job_due_later_waits_for_its_time(make_user, start_worker):
    user = make_user()
    start_worker("scheduler", "scheduler-a")
    start_worker("executor", "executor-a")
    [first] = create(user.pk, [spec(due=due_in(0))])
    wait_until(
        lambda: all_jobs(pk=first)[0].status == "succeeded",
        timeout=30,
        what="the workers run a due job",
    )

    [later] = create(user.pk, [spec(due=due_in(2))])
    [now] = create(user.pk, [spec(due=due_in(0))])
    wait_until(lambda: all_jobs(pk=now)[0].status == "succeeded", timeout=10, what="due job ran")
    wait_until(
        lambda: all_jobs(pk=later)[0].status == "succeeded", timeout=10, what="later job ran"
    )
    # What a user relies on: the job was neither published nor started before its time,
    # however quickly the job due now went through (a wall-clock check in between would
    # race a busy machine).
    job = all_jobs(pk=later)[0]
    assert job.dispatched_at >= job.execute_at
    assert job.started_at >= job.execute_at
