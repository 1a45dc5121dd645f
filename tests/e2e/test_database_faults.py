"""Database faults under running workers: every shard dispatches again, nothing is lost.

Two schedulers and two executors work through a stream of http jobs (every execution
reaches the test's receiver) spread over all four shards, while the test stack's
PostgreSQL misbehaves the way production's does: every session cut at once (what a
pooler restart or ``pg_terminate_backend`` does), the server holding two shards restarted,
and the server holding the control database (users, weights) and two shards restarted.

After each fault every shard dispatches again within RECOVERY_BOUND, every job runs, no
(job, attempt) is delivered twice, and none starts before its execute_at.
"""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from jobsvc.sharding.shards import shard_alias, shard_ids
from tests.e2e.jobs import all_jobs, create, due_in, spec, status_counts
from tests.e2e.servers import postgres_server, restart_postgres, terminate_every_session
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

# Seconds from the end of a fault until every shard dispatches again (the promise):
# a worker notices the broken connection at its next round and reconnects one error
# backoff (1 s) later; the margin covers a busy 2-core machine.
RECOVERY_BOUND = timedelta(seconds=10)
WORKER_ENV = {"JOBSVC_SCHEDULER_QUEUED_TIMEOUT_SECONDS": "5"}
JOBS = 240  # http jobs, due evenly over the run, on every shard
BULK = 10  # jobs per create call


def _cut_every_session() -> None:
    for alias in (shard_alias(0), shard_alias(len(shard_ids()) - 1)):  # one per server
        terminate_every_session(holding=alias)


def _restart_shard_server() -> None:
    restart_postgres(postgres_server(holding=shard_alias(len(shard_ids()) - 1)))


def _restart_control_server() -> None:
    restart_postgres(postgres_server(holding="default"))


FAULTS = {
    "every session cut": _cut_every_session,
    "shard server restarted": _restart_shard_server,
    "control server restarted": _restart_control_server,
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_every_shard_dispatches_again_after_a_database_fault_and_no_job_is_lost(
    fault, make_user, start_worker, receiver, monkeypatch
):
    user = make_user()
    for name in ("scheduler-a", "scheduler-b"):
        start_worker("scheduler", name, env=WORKER_ENV)
    for name in ("executor-a", "executor-b"):
        start_worker("executor", name, env=WORKER_ENV)
    shards = itertools.cycle(shard_ids())
    monkeypatch.setattr("jobsvc.jobs.services.pick_shard_for_new_jobs", lambda: next(shards))
    step = 14.0 / JOBS
    specs = [
        spec(due=due_in(2.0 + i * step), handler="http", params={"url": receiver.url})
        for i in range(JOBS)
    ]
    calls = JOBS // BULK
    ids = [job_id for call in range(calls) for job_id in create(user.pk, specs[call::calls])]
    wait_until(lambda: len(receiver.count_by_job()) >= JOBS // 5, timeout=30, what="jobs ran")

    FAULTS[fault]()
    fault_ended = timezone.now()
    connections.close_all()  # this test's own sessions were cut too

    wait_until(lambda: status_counts()["succeeded"] == JOBS, timeout=90, what="every job succeeded")
    deliveries = Counter((d.job_id, d.attempt) for d in receiver.deliveries())
    assert {job_id for job_id, _ in deliveries} == set(ids), "a job was lost"
    twice = {key: n for key, n in deliveries.items() if n > 1}
    assert not twice, f"(job, attempt) delivered more than once: {twice}"
    jobs = all_jobs()
    assert all(job.started_at >= job.execute_at for job in jobs), "a job started early"
    for shard_id in shard_ids():
        after = [
            job.dispatched_at
            for job in jobs
            if job.shard_id == shard_id and job.dispatched_at >= fault_ended
        ]
        assert after, f"shard {shard_id} dispatched nothing after the fault"
        recovered = min(after) - fault_ended
        assert recovered <= RECOVERY_BOUND, f"shard {shard_id} dispatched again {recovered} later"
