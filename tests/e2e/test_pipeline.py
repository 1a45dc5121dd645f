"""A job goes from the API's store through a scheduler and an executor to succeeded."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings

from jobsvc.sharding.ids import shard_of
from jobsvc.sharding.shards import shard_count
from tests.e2e.jobs import all_jobs, create, due_in, spec, status_counts
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

DISPATCH_AHEAD = settings.SCHEDULER_DISPATCH_AHEAD


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
    assert all(job.finished_at >= job.started_at >= job.execute_at for job in jobs)
    assert all(job.started_at >= job.dispatched_at for job in jobs)


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
    # What a user relies on: the job did not start before its time, however quickly the
    # job due now went through (a wall-clock check in between would race a busy machine);
    # it was published no earlier than the dispatch-ahead time before it.
    job = all_jobs(pk=later)[0]
    assert job.started_at >= job.execute_at
    assert job.dispatched_at >= job.execute_at - timedelta(seconds=DISPATCH_AHEAD)


def test_a_job_created_due_now_does_not_wait_for_the_next_poll(make_user, start_worker):
    """The API tells the job's shard's scheduler, whose next round starts at once: with
    rounds otherwise a minute apart, each job still runs within seconds."""
    user = make_user()
    # Due now on every shard before the workers start: each shard's first round sends
    # them, and from that round on its scheduler hears the API.
    first = create(user.pk, [spec() for _ in range(settings.BULK_SPREAD_MIN_JOBS)])
    assert {shard_of(job_id) for job_id in first} == set(range(shard_count()))
    start_worker("scheduler", "scheduler-a", env={"JOBSVC_SCHEDULER_POLL_INTERVAL_SECONDS": "60"})
    start_worker("executor", "executor-a")
    wait_until(
        lambda: status_counts()["succeeded"] == len(first),
        timeout=30,
        what="each shard's first round sent its jobs, and they ran",
    )

    for n in range(3):
        [job_id] = create(user.pk, [spec()])
        wait_until(
            lambda job_id=job_id: all_jobs(pk=job_id)[0].status == "succeeded",
            timeout=20,
            what=f"job {n}, due now, ran without waiting for the next poll",
        )


def test_jobs_sent_ahead_of_their_time_wait_for_it_in_the_executor(make_user, start_worker):
    """Schedulers publish a job up to the dispatch-ahead time before it is due, so that
    the trip to the executor is made while it waits anyway; the executor holds it until
    it is due. Jobs due at moments 10 ms apart, so that every one is held a different time."""
    user = make_user()
    start_worker("scheduler", "scheduler-a", env={"JOBSVC_SCHEDULER_DISPATCH_AHEAD_SECONDS": "3"})
    start_worker("executor", "executor-a")
    [warm] = create(user.pk, [spec(due=due_in(0))])
    wait_until(
        lambda: all_jobs(pk=warm)[0].status == "succeeded", timeout=30, what="the workers run"
    )

    ids = create(user.pk, [spec(due=due_in(2.5 + i * 0.01)) for i in range(100)])
    wait_until(
        lambda: status_counts()["succeeded"] == len(ids) + 1, timeout=30, what="every job ran"
    )

    jobs = [job for job in all_jobs() if job.id in set(ids)]
    assert all(job.started_at >= job.execute_at for job in jobs), "none started early"
    sent_ahead = [job for job in jobs if job.dispatched_at < job.execute_at]
    # Each was created 2.5 s or more before its time and the workers were idle: the next
    # scheduler round (0.1 s apart) sends it, so not one is sent after its time.
    assert len(sent_ahead) == len(jobs), f"{len(jobs) - len(sent_ahead)} were sent late"
    assert all(job.dispatched_at >= job.execute_at - timedelta(seconds=3) for job in jobs), (
        "none was sent more than the dispatch-ahead time before it was due"
    )
