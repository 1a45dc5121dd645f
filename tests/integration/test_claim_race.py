"""Claims of an attempt another transaction is changing: a duplicate message's claim
starts nothing, and a job made due again meanwhile is left due.

Each claim is ``ClaimStore``'s own, in its own session; the first holds its transaction
open, as a claim of inline jobs does while their handlers run, so the second waits for
the row and then sees it as the first left it.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connections, transaction
from django.utils import timezone

from executor_worker.claims import ClaimRequest, ClaimStore
from jobsvc.jobs import store
from jobsvc.jobs.models import Job
from jobsvc.jobs.specs import JobSpec
from jobsvc.sharding.ids import new_job_id
from jobsvc.sharding.shards import shard_alias
from tests.integration.threads import in_thread
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

SHARD = 1
ALIAS = shard_alias(SHARD)
USER = 4242
LEASE = 30.0


def _queued_job() -> ClaimRequest:
    now = timezone.now()
    spec = JobSpec(
        message="once", execute_at=now - timedelta(seconds=5), max_attempts=3, timeout_seconds=30
    )
    row = store.new_job_row(
        job_id=new_job_id(shard_id=SHARD, at=now), user_id=USER, spec=spec, shard_id=SHARD, now=now
    )
    store.insert_jobs(ALIAS, [row])
    Job.objects.using(ALIAS).filter(pk=row.id).update(status="queued")
    job = Job.objects.using(ALIAS).get(pk=row.id)
    return ClaimRequest(job_id=job.id, attempt=1, user_id=USER, due_at=job.due_at)


def _someone_waits_for_a_row_lock() -> bool:
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
        return cursor.fetchone()[0] > 0


@pytest.mark.parametrize("first", ["claim", "claim_succeeded"])
def test_a_second_claim_of_an_attempt_waits_for_the_first_and_starts_nothing(first):
    request = _queued_job()
    inside, release = threading.Event(), threading.Event()

    def first_claim():
        claims = ClaimStore(shard_id=SHARD, lease_seconds=LEASE)
        with transaction.atomic(using=ALIAS):
            if first == "claim":
                claimed = claims.claim([request])
            else:
                claimed = claims.claim_succeeded([request], handlers=["default"])
            inside.set()
            assert release.wait(timeout=30)
        return claimed

    holder, held = in_thread(first_claim)
    assert inside.wait(timeout=30)
    second, seconded = in_thread(
        lambda: ClaimStore(shard_id=SHARD, lease_seconds=LEASE).claim([request])
    )
    wait_until(_someone_waits_for_a_row_lock, timeout=30, what="the second claim waits")
    release.set()
    holder.join(timeout=30)
    second.join(timeout=30)

    assert "error" not in held and "error" not in seconded, (held, seconded)
    assert [attempt.job_id for attempt in held["value"]] == [request.job_id]
    assert seconded["value"] == []
    job = Job.objects.using(ALIAS).get(pk=request.job_id)
    assert job.attempts == 1
    assert job.status == ("running" if first == "claim" else "succeeded")


def test_a_job_made_due_again_while_a_claim_waits_is_left_due_for_its_next_dispatch():
    request = _queued_job()
    inside, release = threading.Event(), threading.Event()

    def make_due_again():  # as a new shard owner does with an older owner's dispatches
        with transaction.atomic(using=ALIAS):
            Job.objects.using(ALIAS).filter(pk=request.job_id).update(status="scheduled")
            inside.set()
            assert release.wait(timeout=30)

    holder, held = in_thread(make_due_again)
    assert inside.wait(timeout=30)
    claimer, claimed = in_thread(
        lambda: ClaimStore(shard_id=SHARD, lease_seconds=LEASE).claim([request])
    )
    wait_until(_someone_waits_for_a_row_lock, timeout=30, what="the claim waits")
    release.set()
    holder.join(timeout=30)
    claimer.join(timeout=30)

    # This message starts nothing; the job is due, for the scheduler to dispatch again.
    assert "error" not in held and "error" not in claimed, (held, claimed)
    assert claimed["value"] == []
    job = Job.objects.using(ALIAS).get(pk=request.job_id)
    assert (job.status, job.attempts) == ("scheduled", 0)
