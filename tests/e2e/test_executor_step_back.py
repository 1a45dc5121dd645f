"""An executor that cannot reach a shard the other executor reaches leaves the consumer
group, so the other runs that shard's jobs, and joins again if the other dies; a shard no
executor reaches moves nothing.

Executor A is configured with a wrong address for one shard (a fault local to it: B
reaches the shard fine). Jobs on that shard are dealt to A's partitions as to B's.
"""

from __future__ import annotations

import pytest

from jobsvc.sharding.shards import shard_ids
from tests.e2e.faults import shard_failures, shard_nowhere, shard_through
from tests.e2e.jobs import all_jobs, create, due_in, spec
from tests.e2e.test_executor_shutdown import RUN_TIMEOUT, assignment
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

STEP_BACK_AFTER = "2"  # seconds a shard fails on an executor before it leaves the group
# Executors that leave the group stay out far past the test's timeouts, unless something
# else calls them back.
STAY_OUT = {
    "JOBSVC_EXECUTOR_STEP_BACK_AFTER_SECONDS": STEP_BACK_AFTER,
    "JOBSVC_EXECUTOR_STEP_BACK_SECONDS": "600",
}
JOBS = 40


def test_an_executor_cut_off_from_a_shard_hands_its_jobs_to_one_that_reaches_it(
    make_user, start_worker, messaging, monkeypatch
):
    shard = max(shard_ids())
    cut_off = start_worker("executor", "executor-a", env={**STAY_OUT, **shard_nowhere(shard)})
    other = start_worker("executor", "executor-b", env=STAY_OUT)
    start_worker("scheduler", "scheduler-a")
    wait_until(  # else the first in the group may run every job before the other joins
        lambda: all(assignment(e, messaging.jobs_topic) for e in (cut_off, other)),
        timeout=RUN_TIMEOUT,
        what="both executors hold partitions",
    )
    monkeypatch.setattr("jobsvc.jobs.services.pick_shard_for_new_jobs", lambda: shard)
    user = make_user()
    ids = create(user.pk, [spec(due=due_in(0)) for _ in range(JOBS)])

    wait_until(
        lambda: all(job.status == "succeeded" for job in all_jobs(pk__in=ids)),
        timeout=60,
        what="every job on the shard ran",
    )
    assert "leaving the consumer group" in cut_off.log()
    assert {job.attempts for job in all_jobs(pk__in=ids)} == {1}
    assert cut_off.alive(), "an executor out of the group stays up, to join it again"


def test_an_executor_that_stepped_back_joins_again_when_the_one_it_left_for_dies(
    make_user, start_worker, messaging, monkeypatch
):
    shard = max(shard_ids())
    cut_off = start_worker("executor", "executor-a", env={**STAY_OUT, **shard_nowhere(shard)})
    other = start_worker("executor", "executor-b", env=STAY_OUT)
    wait_until(  # its clock probes of the shard fail, with or without jobs there
        lambda: "leaving the consumer group" in cut_off.log(),
        timeout=RUN_TIMEOUT,
        what="executor-a stepped back",
    )
    other.kill()
    start_worker("scheduler", "scheduler-a")
    monkeypatch.setattr("jobsvc.jobs.services.pick_shard_for_new_jobs", lambda: min(shard_ids()))
    ids = create(make_user().pk, [spec(due=due_in(0)) for _ in range(JOBS)])

    wait_until(
        lambda: all(job.status == "succeeded" for job in all_jobs(pk__in=ids)),
        timeout=60,
        what="the reachable shard's jobs ran on the executor left",
    )
    assert "joining the consumer group again" in cut_off.log()
    assert assignment(cut_off, messaging.jobs_topic)


def test_an_executor_that_stepped_back_joins_again_once_the_shard_answers(
    start_worker, messaging, shard_proxy
):
    shard_proxy.cut()
    cut_off = start_worker(
        "executor", "executor-a", env={**STAY_OUT, **shard_through(shard_proxy, max(shard_ids()))}
    )
    start_worker("executor", "executor-b", env=STAY_OUT)
    wait_until(
        lambda: "leaving the consumer group" in cut_off.log(),
        timeout=RUN_TIMEOUT,
        what="executor-a stepped back",
    )

    shard_proxy.restore()

    wait_until(
        lambda: assignment(cut_off, messaging.jobs_topic),
        timeout=RUN_TIMEOUT,
        what="executor-a holds partitions again",
    )
    assert "every shard answers here again" in cut_off.log()


def test_a_shard_no_executor_reaches_keeps_both_executors_in_the_group(
    make_user, start_worker, monkeypatch
):
    shard = max(shard_ids())
    env = {"JOBSVC_EXECUTOR_STEP_BACK_AFTER_SECONDS": STEP_BACK_AFTER, **shard_nowhere(shard)}
    executors = [start_worker("executor", name, env=env) for name in ("executor-a", "executor-b")]
    start_worker("scheduler", "scheduler-a")
    other = min(shard_ids())
    user = make_user()
    monkeypatch.setattr("jobsvc.jobs.services.pick_shard_for_new_jobs", lambda: shard)
    stuck = create(user.pk, [spec(due=due_in(0)) for _ in range(JOBS)])
    monkeypatch.setattr("jobsvc.jobs.services.pick_shard_for_new_jobs", lambda: other)
    ids = create(user.pk, [spec(due=due_in(0)) for _ in range(JOBS)])
    wait_until(
        lambda: all(job.status == "succeeded" for job in all_jobs(pk__in=ids)),
        timeout=60,
        what="the reachable shard's jobs ran",
    )
    for executor in executors:
        wait_until(
            lambda executor=executor: shard_failures(executor, shard) >= 3,
            timeout=30,
            what="the cut shard keeps failing",
        )
        assert "leaving the consumer group" not in executor.log()
    assert {job.status for job in all_jobs(pk__in=stuck)} == {"queued"}
