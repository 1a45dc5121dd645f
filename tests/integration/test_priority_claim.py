"""Priority within a user's own jobs, as the scheduler's queries see it: a user's urgent
job is claimed ahead of their own backlog, without reading that backlog, and a user's
due jobs are found whatever the priority of their other jobs.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from jobsvc.jobs import store
from jobsvc.jobs.priorities import PRIORITY_MAX, PRIORITY_MIN
from jobsvc.jobs.specs import JobSpec
from jobsvc.sharding.ids import new_job_id
from jobsvc.sharding.shards import shard_alias
from scheduler_worker import queries
from scheduler_worker.shard_store import ShardStore
from tests.integration.plans import explain, scans_of_jobs

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

SHARD = 2  # test_shard_store's shard: the ANALYZE here must not steer other shards' plans
ALIAS = shard_alias(SHARD)
QUEUED_TIMEOUT = 90.0


@pytest.fixture
def shard() -> Iterator[ShardStore]:
    shard_store = ShardStore(alias=ALIAS, shard_id=SHARD)
    yield shard_store
    shard_store.close()


def _jobs(user_id: int, count: int, *, priority: int = 5, due_in_minutes: float = -1) -> list[str]:
    now = timezone.now()
    spec = JobSpec(
        message=f"priority {priority}",
        execute_at=now + timedelta(minutes=due_in_minutes),
        max_attempts=3,
        timeout_seconds=30.0,
        priority=priority,
    )
    rows = [
        store.new_job_row(
            job_id=new_job_id(shard_id=SHARD, at=now),
            user_id=user_id,
            spec=spec,
            shard_id=SHARD,
            now=now,
        )
        for _ in range(count)
    ]
    store.insert_jobs(ALIAS, rows)
    return [row.id for row in rows]


def test_a_users_urgent_job_is_claimed_ahead_of_their_own_backlog(shard):
    epoch = shard.acquire_lease(owner="priority-test")
    _jobs(1, 5000, due_in_minutes=-10)  # the backlog, overdue for longer
    [urgent] = _jobs(1, 1, priority=9)

    claimed = shard.claim(epoch=epoch, quotas={1: 10}, queued_timeout=QUEUED_TIMEOUT)

    assert len(claimed) == 10
    assert urgent in {job.job_id for job in claimed}


def test_priorities_are_taken_highest_first_and_in_due_order_within_one(shard):
    epoch = shard.acquire_lease(owner="priority-test")
    low = _jobs(1, 2, priority=1, due_in_minutes=-30)
    middle = _jobs(1, 2, priority=5, due_in_minutes=-20)
    [high_late] = _jobs(1, 1, priority=9, due_in_minutes=-1)
    [high_early] = _jobs(1, 1, priority=9, due_in_minutes=-5)

    first = shard.claim(epoch=epoch, quotas={1: 3}, queued_timeout=QUEUED_TIMEOUT)
    second = shard.claim(epoch=epoch, quotas={1: 3}, queued_timeout=QUEUED_TIMEOUT)

    # The two middle jobs are due at the same instant: the id decides between them.
    assert {job.job_id for job in first} == {high_early, high_late, min(middle)}
    assert {job.job_id for job in second} == {max(middle), *low}


def test_a_high_priority_job_is_not_claimed_before_it_is_due(shard):
    epoch = shard.acquire_lease(owner="priority-test")
    _jobs(1, 1, priority=9, due_in_minutes=10)
    due = _jobs(1, 2, priority=1)

    claimed = shard.claim(epoch=epoch, quotas={1: 10}, queued_timeout=QUEUED_TIMEOUT)

    assert sorted(job.job_id for job in claimed) == sorted(due)


def test_a_user_is_due_even_when_their_top_priority_is_not(shard):
    _jobs(1, 1, priority=9, due_in_minutes=10)
    _jobs(1, 1, priority=2)
    _jobs(2, 1, priority=9, due_in_minutes=10)  # nothing due
    _jobs(3, 1, priority=5)

    assert shard.due_users() == [1, 3]


def test_finding_due_users_reads_one_row_per_user_and_priority(shard):
    _jobs(21, 5000)  # a heavy user, one priority
    for priority in (1, 5, 9):
        _jobs(22, 3, priority=priority)
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("ANALYZE jobs")
        plan = explain(cursor, queries.DUE_USERS, {"ahead": 0.0})

    rows_read = _rows_read_from_jobs(plan)

    # (21, 5), (22, 1), (22, 5), (22, 9), and the probe that finds no next pair.
    assert rows_read <= 5


def test_a_claim_reads_at_most_its_quota_per_priority(shard):
    shard.acquire_lease(owner="priority-test")
    _jobs(21, 5000)
    _jobs(21, 5, priority=9)
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("ANALYZE jobs")
        plan = explain(
            cursor,
            queries.PICK_FOR_DISPATCH,
            {"user_ids": [21], "quotas": [100], "ahead": 0.0},
        )

    rows_read = _rows_read_from_jobs(plan)

    # The index ranges read: 5 at priority 9 and 100 at priority 5, not the 5,000 (and a
    # row of slack per priority: EXPLAIN rounds rows per loop).
    assert rows_read <= 105 + PRIORITY_MAX - PRIORITY_MIN + 1


def _rows_read_from_jobs(plan) -> int:
    scans = scans_of_jobs(plan)
    for scan in scans:
        assert scan["Node Type"] != "Seq Scan", scan
    return sum(scan["Actual Rows"] * scan["Actual Loops"] for scan in scans)
