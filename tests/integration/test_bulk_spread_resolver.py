"""Prepared transactions that a spread bulk request left behind are resolved by the sweep.

A request's API process (or its connection) can die between the two phases: after the
other shards prepared their share, before or after the coordinator committed. The shard's
sweep then commits or rolls back what was prepared, as the coordinator's decision row says,
so the request's jobs exist on every shard or on none. Real PostgreSQL servers, committed
transactions (``transaction=True``), no API process: the request is cut short by calling
the two phases' steps directly.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import IntegrityError
from django.utils import timezone

from jobsvc.jobs import spread, store
from jobsvc.jobs.models import Job
from jobsvc.jobs.specs import JobSpec
from jobsvc.sharding.ids import new_job_id
from jobsvc.sharding.shards import shard_alias
from scheduler_worker.shard_store import ShardStore
from scheduler_worker.sweeper import ShardSweeper
from tests.conftest import prepared_bulk_transactions

pytestmark = [
    pytest.mark.django_db(databases="__all__", transaction=True),
    pytest.mark.usefixtures("no_prepared_bulk_transaction_left"),
]

COORDINATOR = 0
OTHERS = (1, 2)
USER = 424242


def rows_on(shard_id: int, count: int) -> list[store.JobRow]:
    now = timezone.now()
    spec = JobSpec(message="m", execute_at=now, max_attempts=3, timeout_seconds=30.0)
    return [
        store.new_job_row(
            job_id=new_job_id(shard_id=shard_id),
            user_id=USER,
            spec=spec,
            shard_id=shard_id,
            now=now,
        )
        for _ in range(count)
    ]


def jobs_on(shard_id: int) -> int:
    return Job.objects.using(shard_alias(shard_id)).filter(user_id=USER).count()


def prepared_on(shard_id: int) -> list[str]:
    return prepared_bulk_transactions(shard_alias(shard_id))


def cut_short(*, coordinator_committed: bool) -> str:
    """A spread request whose process died after the other shards prepared their share;
    the coordinator's own transaction committed (with its decision row) or never did."""
    batch = f"{COORDINATOR}.{uuid.uuid4().hex}"
    for shard_id in OTHERS:
        spread._prepare(shard_alias(shard_id), spread._gid(batch, shard_id), rows_on(shard_id, 5))
    if coordinator_committed:
        store.insert_jobs(shard_alias(COORDINATOR), rows_on(COORDINATOR, 5))
        store.record_bulk_decision(shard_alias(COORDINATOR), batch=batch, committed=True)
    return batch


def sweep(shard_id: int) -> None:
    shard = ShardStore(alias=shard_alias(shard_id), shard_id=shard_id)
    sweeper = ShardSweeper(
        store=shard,
        producer=None,  # no job is abandoned here: nothing to dead-letter
        dead_letter_topic="unused",
        publish_timeout=1.0,
        sweep_interval=5.0,
        clock=lambda: 0.0,
    )
    sweeper.sweep(epoch=shard.acquire_lease(owner="test"))


def test_a_young_undecided_transaction_is_left_to_its_request():
    batch = cut_short(coordinator_committed=False)

    assert [jobs_on(shard_id) for shard_id in OTHERS] == [0, 0]
    for shard_id in OTHERS:  # younger than RESOLVE_AFTER: its request may still commit
        sweep(shard_id)
    assert [jobs_on(shard_id) for shard_id in OTHERS] == [0, 0]
    assert all(prepared_on(shard_id) for shard_id in OTHERS)
    # and nothing was decided for it: the request can still commit
    store.record_bulk_decision(shard_alias(COORDINATOR), batch=batch, committed=True)


def test_a_young_decided_transaction_is_left_to_its_request():
    # Its request commits it a few milliseconds after the commit point: a sweep between
    # the two would race it (and log a transaction left behind that was not).
    batch = cut_short(coordinator_committed=True)

    for shard_id in OTHERS:
        sweep(shard_id)
    assert [jobs_on(shard_id) for shard_id in OTHERS] == [0, 0]
    for shard_id in OTHERS:  # the request's own second phase still finds them
        assert spread._finish(shard_alias(shard_id), spread._gid(batch, shard_id), commit=True)
    assert [jobs_on(shard_id) for shard_id in OTHERS] == [5, 5]


def test_the_sweep_commits_what_the_coordinator_committed_once_past_the_grace(monkeypatch):
    # the request lost the other shards after its commit point: their shares are not
    # left invisible until RESOLVE_AFTER, only SWEEP_GRACE
    monkeypatch.setattr(spread, "SWEEP_GRACE", timedelta(0))
    cut_short(coordinator_committed=True)

    for shard_id in OTHERS:
        sweep(shard_id)

    assert [jobs_on(shard_id) for shard_id in (COORDINATOR, *OTHERS)] == [5, 5, 5]
    assert [prepared_on(shard_id) for shard_id in OTHERS] == [[], []]


def test_an_old_undecided_transaction_is_rolled_back(monkeypatch):
    monkeypatch.setattr(spread, "RESOLVE_AFTER", timedelta(0))
    monkeypatch.setattr(spread, "SWEEP_GRACE", timedelta(0))
    batch = cut_short(coordinator_committed=False)

    for shard_id in OTHERS:
        sweep(shard_id)

    assert [jobs_on(shard_id) for shard_id in (COORDINATOR, *OTHERS)] == [0, 0, 0]
    assert [prepared_on(shard_id) for shard_id in OTHERS] == [[], []]
    # a coordinator still running cannot commit the batch after that
    with pytest.raises(IntegrityError):
        store.record_bulk_decision(shard_alias(COORDINATOR), batch=batch, committed=True)
