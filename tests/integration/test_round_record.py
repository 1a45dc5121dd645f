"""The shard's owner records its dispatch rounds in the lease row; a stale owner cannot."""

from __future__ import annotations

import pytest

from jobsvc.jobs.models import ShardLease
from jobsvc.sharding.shards import shard_alias
from scheduler_worker.shard_store import ShardStore

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)


def _lease() -> ShardLease:
    return ShardLease.objects.using(shard_alias(1)).get(shard_id=1)


def test_the_owner_records_its_round_and_a_stale_owner_changes_nothing():
    old_owner = ShardStore(alias=shard_alias(1), shard_id=1)
    new_owner = ShardStore(alias=shard_alias(1), shard_id=1)
    old_epoch = old_owner.acquire_lease(owner="scheduler-a")
    old_owner.record_round(epoch=old_epoch)
    first = _lease().last_round_at

    new_epoch = new_owner.acquire_lease(owner="scheduler-b")
    old_owner.record_round(epoch=old_epoch)
    after_stale = _lease().last_round_at
    new_owner.record_round(epoch=new_epoch)

    assert first is not None
    assert after_stale == first
    assert _lease().last_round_at > first
    for store in (old_owner, new_owner):
        store.close()
