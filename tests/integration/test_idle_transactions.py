"""A process paused inside a transaction does not keep others from the rows it locked.

A worker can stop between two statements of a transaction at any time: SIGSTOP, a GC
pause, a swap storm, a stopped VM. Its rows stay locked until PostgreSQL ends the idle
transaction. An executor's claim locks the jobs it starts; once the consumer group gives
its partitions to another executor (``session.timeout.ms``, 6 s), that executor claims the
same jobs and must not wait for the frozen one to wake up.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import DatabaseError, connections, transaction
from django.utils import timezone

from executor_worker.claims import Attempt, ClaimRequest, ClaimStore
from jobsvc.jobs import store
from jobsvc.jobs.models import Job
from jobsvc.jobs.specs import JobSpec
from jobsvc.sharding.ids import new_job_id
from jobsvc.sharding.shards import shard_alias

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

SHARD = 1
ALIAS = shard_alias(SHARD)
# The executor's consumer session: its partitions move to another executor this long
# after it stopped answering (executor_worker.consumer.JobConsumer).
CONSUMER_SESSION_SECONDS = 6.0


def _queued_job() -> str:
    now = timezone.now()
    spec = JobSpec(
        message="claim me",
        execute_at=now - timedelta(seconds=1),
        max_attempts=3,
        timeout_seconds=30.0,
        handler="default",
        handler_params={},
    )
    job_id = new_job_id(shard_id=SHARD, at=now)
    row = store.new_job_row(job_id=job_id, user_id=42, spec=spec, shard_id=SHARD, now=now)
    store.insert_jobs(ALIAS, [row])
    Job.objects.using(ALIAS).filter(pk=job_id).update(status="queued")
    return job_id


def _request(job_id: str) -> ClaimRequest:
    job = Job.objects.using(ALIAS).get(pk=job_id)
    return ClaimRequest(job_id, 1, job.user_id, job.due_at)


def test_the_idle_limit_ends_a_transaction_before_a_frozen_executors_partitions_move():
    assert 0 < settings.DB_IDLE_IN_TRANSACTION_TIMEOUT < CONSUMER_SESSION_SECONDS


def test_an_executor_frozen_inside_its_claim_does_not_keep_another_from_the_jobs():
    job_id = _queued_job()
    inside, unfreeze = threading.Event(), threading.Event()
    frozen_outcome: list[BaseException | None] = []

    def frozen_executor() -> None:
        try:
            with transaction.atomic(using=ALIAS):
                ClaimStore(shard_id=SHARD, lease_seconds=1.0).claim([_request(job_id)])
                inside.set()
                unfreeze.wait()  # the process is stopped here, before its commit
            frozen_outcome.append(None)
        except DatabaseError as exc:
            frozen_outcome.append(exc)
        finally:
            connections.close_all()

    frozen = threading.Thread(target=frozen_executor)
    frozen.start()
    assert inside.wait(10)
    claimed: list[Attempt] = []

    def next_executor() -> None:
        try:
            claimed.extend(ClaimStore(shard_id=SHARD, lease_seconds=1.0).claim([_request(job_id)]))
        finally:
            connections.close_all()

    started = time.monotonic()
    taker = threading.Thread(target=next_executor)
    taker.start()
    taker.join(settings.DB_IDLE_IN_TRANSACTION_TIMEOUT + 5)
    claimed_while_frozen = [(a.job_id, a.attempt) for a in claimed]
    waited = time.monotonic() - started
    unfreeze.set()
    frozen.join(10)
    taker.join(settings.DB_STATEMENT_TIMEOUT + 5)

    assert claimed_while_frozen == [(job_id, 1)], f"still waiting after {waited:.1f} s"
    [outcome] = frozen_outcome
    assert isinstance(outcome, DatabaseError), "the frozen executor's claim was rolled back"
    job = Job.objects.using(ALIAS).get(pk=job_id)
    assert (job.status, job.attempts) == ("running", 1)


def _idle_then_query(claims: ClaimStore, *, idle: float, allow: float | None) -> None:
    """In a transaction under a short server limit (0.3 s), sit idle, then query."""
    with transaction.atomic(using=ALIAS), connections[ALIAS].cursor() as cursor:
        cursor.execute("SELECT set_config('idle_in_transaction_session_timeout', '300', true)")
        if allow is not None:
            claims.allow_idle(allow)
        time.sleep(idle)  # the client idle inside its transaction: what is measured
        cursor.execute("SELECT 1")


def test_a_transaction_that_publishes_inside_may_sit_idle_as_long_as_it_allows():
    claims = ClaimStore(shard_id=SHARD, lease_seconds=1.0)
    _idle_then_query(claims, idle=1.0, allow=5.0)  # no error: the limit was raised
    try:
        with pytest.raises(DatabaseError):
            _idle_then_query(claims, idle=1.0, allow=None)
    finally:
        connections[ALIAS].close()
