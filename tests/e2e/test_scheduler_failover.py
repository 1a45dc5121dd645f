"""Two schedulers share four shards; one dies (SIGKILL) or freezes (SIGSTOP) mid-stream.

Every job is delivered through the http handler to the test's receiver, so each execution
is observable: the survivor takes every shard over, no job is lost and none runs twice.
"""

from __future__ import annotations

from collections import Counter

import pytest
from django.conf import settings
from django.db.models import Count

from coordination.client import connect
from coordination.paths import ZnodePaths
from jobsvc.jobs.models import Job, ShardLease
from jobsvc.sharding.shards import shard_alias, shard_ids
from scheduler_worker.queries import LOST_ATTEMPT_ERROR
from tests.e2e.conftest import FAST_TIMINGS
from tests.e2e.jobs import all_jobs, create, due_in, spec, status_counts
from tests.e2e.servers import postgres_log_marks, postgres_logs_since
from tests.waiting import wait_until
from tools.devstack import zookeeper

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

# A job a dead or frozen worker claimed but never published is due again after this long.
SCHEDULER_ENV = {"JOBSVC_SCHEDULER_QUEUED_TIMEOUT_SECONDS": "3"}
# Seconds from a worker's death (or freeze) until the survivor owns its shards, by design:
# ZooKeeper expires the dead session one session timeout after it last heard from it,
# rounded up to its next tick; the survivor's member watch then fires, and it creates the
# owner nodes and bumps each lease epoch in the shard database (tens of milliseconds when
# the machine is quiet, measured; the margin covers a busy 2-core machine).
TAKEOVER_BOUND = (
    float(FAST_TIMINGS["JOBSVC_ZK_SESSION_TIMEOUT_SECONDS"])
    + zookeeper.TICK_TIME_MS / 1000
    + 2.0  # margin: watch delivery, owner-node creates, lease writes, this test's polling
)
JOBS = 300
BULK = 10  # jobs per create call; each call lands on a random shard


def lease(shard_id: int) -> ShardLease | None:
    return ShardLease.objects.using(shard_alias(shard_id)).filter(pk=shard_id).first()


def owners() -> dict[int, str]:
    """Each shard's owner according to the fencing record ('' for none yet)."""
    return {shard_id: getattr(lease(shard_id), "owner", "") for shard_id in shard_ids()}


def epochs() -> dict[int, int]:
    return {shard_id: getattr(lease(shard_id), "epoch", 0) for shard_id in shard_ids()}


def split_between(*workers: str) -> bool:
    """Every shard is owned, evenly, by exactly these workers."""
    counts = Counter(owners().values())
    return set(counts) == set(workers) and max(counts.values()) - min(counts.values()) <= 1


def znode_owners(zk_root: str) -> dict[int, str]:
    """Each shard's owner according to ZooKeeper (its ephemeral owner node)."""
    client = connect(settings.ZK_HOSTS, session_timeout=10.0, connect_timeout=10.0)
    paths = ZnodePaths(zk_root)
    try:
        found = {}
        for shard_id in shard_ids():
            if client.exists(paths.shard_owner(shard_id)):
                found[shard_id] = client.get(paths.shard_owner(shard_id))[0].decode()
        return found
    finally:
        client.stop()
        client.close()


def start_pair(start_worker):
    a = start_worker("scheduler", "scheduler-a", env=SCHEDULER_ENV)
    b = start_worker("scheduler", "scheduler-b", env=SCHEDULER_ENV)
    start_worker("executor", "executor-a")
    wait_until(
        lambda: split_between("scheduler-a", "scheduler-b"),
        timeout=30,
        what="the two schedulers split the four shards",
    )
    return a, b


def create_jobs(user_id: int, url: str, *, first: float, last: float) -> list[str]:
    """JOBS http jobs due evenly between ``first`` and ``last`` seconds from now.

    Each create call lands on a random shard, so every call takes jobs due across the whole
    period: every shard then has jobs due all along, before and after a failure.
    """
    step = (last - first) / JOBS
    specs = [
        spec(due=due_in(first + i * step), handler="http", params={"url": url}) for i in range(JOBS)
    ]
    calls = JOBS // BULK
    ids: list[str] = []
    for call in range(calls):
        ids += create(user_id, specs[call::calls])
    return ids


def jobs_by_epoch(shards) -> dict[int, dict[tuple[str, int | None], int]]:
    """Per shard: how many of its jobs have each status and dispatch epoch."""
    return {
        shard_id: {
            (row["status"], row["dispatch_epoch"]): row["n"]
            for row in Job.objects.using(shard_alias(shard_id))
            .values("status", "dispatch_epoch")
            .annotate(n=Count("id"))
        }
        for shard_id in shards
    }


def assert_each_job_ran_exactly_once(ids: list[str], receiver) -> None:
    wait_until(
        lambda: status_counts()["succeeded"] == len(ids), timeout=60, what="every job succeeded"
    )
    deliveries = receiver.count_by_job()
    assert set(deliveries) == set(ids), "a job was lost, or an unknown one delivered"
    twice = {job_id: n for job_id, n in deliveries.items() if n != 1}
    assert not twice, f"jobs delivered more than once: {twice}"
    # A second attempt is only ever the http handler's retry of a failed request (the
    # receiver's small listen backlog can reset a connection); failover costs no attempt.
    for job in all_jobs():
        errors = [error["error"] for error in job.attempt_errors]
        assert job.attempts == 1 + len(errors), (job.id, errors)
        assert LOST_ATTEMPT_ERROR not in errors, (job.id, errors)


def test_a_killed_schedulers_shards_move_to_the_survivor_without_losing_a_job(
    make_user, start_worker, receiver, messaging
):
    user = make_user()
    a, _b = start_pair(start_worker)
    ids = create_jobs(user.pk, receiver.url, first=1.0, last=7.0)
    before = epochs()
    wait_until(lambda: len(receiver.count_by_job()) >= JOBS // 4, timeout=30, what="stream ran")

    a.kill()
    takeover = wait_until(
        lambda: set(owners().values()) == {"scheduler-b"},
        timeout=3 * TAKEOVER_BOUND,
        what="the survivor owns every shard",
    )

    assert takeover < TAKEOVER_BOUND, f"takeover took {takeover:.1f} s"
    moved = [shard_id for shard_id, epoch in epochs().items() if epoch > before[shard_id]]
    assert len(moved) == 2, "the dead worker's two shards were taken over under new epochs"
    assert znode_owners(messaging.zk_root) == dict.fromkeys(shard_ids(), "scheduler-b")
    assert_each_job_ran_exactly_once(ids, receiver)


def test_a_frozen_scheduler_is_fenced_off_and_no_job_runs_twice(make_user, start_worker, receiver):
    user = make_user()
    database_logs = postgres_log_marks()
    a, b = start_pair(start_worker)
    ids = create_jobs(user.pk, receiver.url, first=1.0, last=12.0)
    wait_until(lambda: len(receiver.count_by_job()) >= JOBS // 10, timeout=30, what="stream ran")
    frozen = {s: lease(s) for s, owner in owners().items() if owner == "scheduler-a"}

    a.pause()  # SIGSTOP: its ZooKeeper session expires (4 s) while it still "owns" shards
    takeover = wait_until(
        lambda: all(lease(s).owner == "scheduler-b" for s in frozen),
        timeout=30,
        what="the other scheduler takes the frozen one's shards",
    )
    assert takeover < TAKEOVER_BOUND, f"takeover took {takeover:.1f} s"
    taken = {s: lease(s) for s in frozen}
    assert all(taken[s].epoch > frozen[s].epoch for s in frozen)
    try:
        wait_until(
            lambda: all(
                Job.objects.using(shard_alias(s)).filter(dispatch_epoch=taken[s].epoch).exists()
                for s in frozen
            ),
            timeout=20,
            what="the new owner dispatches from the taken shards while the old one is frozen",
        )
    except AssertionError as failure:
        raise AssertionError(
            f"{failure}\njobs by shard, status and epoch: {jobs_by_epoch(frozen)}\n"
            f"the new owner's log ends:\n{b.log()[-4000:]}\n"
            f"PostgreSQL logged:\n{postgres_logs_since(database_logs)[-4000:]}"
        ) from None

    a.resume()  # SIGCONT: it runs on, believing for a moment that it owns its shards
    wait_until(
        lambda: split_between("scheduler-a", "scheduler-b"),
        timeout=30,
        what="the resumed scheduler rejoins and gets shards back under new epochs",
    )

    assert_each_job_ran_exactly_once(ids, receiver)
    for shard_id, old in frozen.items():
        stale = Job.objects.using(shard_alias(shard_id)).filter(
            dispatch_epoch=old.epoch, dispatched_at__gt=taken[shard_id].acquired_at
        )
        assert not stale.exists(), f"shard {shard_id}: a write under the stale epoch counted"
    log = a.log()
    assert "fenced" in log or "session lost" in log, log[-3000:]
