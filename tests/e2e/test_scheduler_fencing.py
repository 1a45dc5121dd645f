"""A fence from nowhere: the shard's epoch bumped while ZooKeeper still gives us the shard.

That is what a late ACQUIRE_LEASE does: an older dispatcher of the shard, told to stop
while the database was slow, whose lease bump lands after the current owner's. The owner's
next write is fenced; as ZooKeeper still assigns the shard to it, it must take the lease
again, or nobody ever dispatches the shard.
"""

from __future__ import annotations

import pytest
from django.db import connections

from jobsvc.jobs.models import ShardLease
from jobsvc.sharding.shards import shard_alias
from tests.e2e.jobs import all_jobs, create, due_in, spec
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

SHARD = 1


def lease() -> ShardLease | None:
    return ShardLease.objects.using(shard_alias(SHARD)).filter(pk=SHARD).first()


def test_a_shard_fenced_by_a_stray_lease_bump_is_dispatched_again(
    make_user, start_worker, monkeypatch
):
    monkeypatch.setattr("jobsvc.jobs.services.pick_shard_for_new_jobs", lambda: SHARD)
    user = make_user()
    scheduler = start_worker("scheduler", "scheduler-a")
    start_worker("executor", "executor-a")
    wait_until(lambda: getattr(lease(), "owner", "") == "scheduler-a", timeout=30, what="owned")
    [first] = create(user.pk, [spec(due=due_in(0))])
    wait_until(lambda: all_jobs(pk=first)[0].status == "succeeded", timeout=30, what="first ran")
    owned_at = lease().epoch

    with connections[shard_alias(SHARD)].cursor() as cursor:
        cursor.execute(
            "UPDATE jobs_shard_lease SET epoch = epoch + 1, owner = 'stray' WHERE shard_id = %s",
            [SHARD],
        )
    [later] = create(user.pk, [spec(due=due_in(0))])

    wait_until(
        lambda: all_jobs(pk=later)[0].status == "succeeded",
        timeout=30,
        what="the job created after the fence ran",
    )
    retaken = lease()
    assert retaken.owner == "scheduler-a"
    assert retaken.epoch > owned_at + 1  # taken again, above the stray bump
    assert "fenced" in scheduler.log()
