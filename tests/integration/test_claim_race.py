"""Claims of an attempt another transaction is changing: a duplicate message's claim
starts nothing, and a job made due again meanwhile is left due.

Each claim is ``ClaimStore``'s own, in its own session; the first holds its transaction
open, as a claim of inline jobs does while their handlers run, so the second waits for
the row and then sees it as the first left it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.utils import timezone

from executor_worker.claims import ClaimRequest, ClaimStore
from jobsvc.jobs import store
from jobsvc.jobs.models import Job
from jobsvc.jobs.specs import JobSpec
from jobsvc.sharding.ids import new_job_id
from jobsvc.sharding.shards import shard_alias
from tests.integration.threads import held_open, in_thread, someone_waits_for_a_lock
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


def _claim_behind(write: Callable[[], object], request: ClaimRequest) -> tuple[dict, dict]:
    """``write`` in a transaction held open while another session claims ``request`` and
    waits for its row; then the transaction commits. The outcomes of both."""
    inside, release = threading.Event(), threading.Event()
    holder, held = in_thread(held_open(write, inside, release, using=ALIAS))
    assert inside.wait(timeout=30)
    claimer, claimed = in_thread(
        lambda: ClaimStore(shard_id=SHARD, lease_seconds=LEASE).claim([request])
    )
    wait_until(lambda: someone_waits_for_a_lock(ALIAS), timeout=30, what="the claim waits")
    release.set()
    holder.join(timeout=30)
    claimer.join(timeout=30)
    assert "error" not in held and "error" not in claimed, (held, claimed)
    return held, claimed


@pytest.mark.parametrize("first", ["claim", "claim_succeeded"])
def test_a_second_claim_of_an_attempt_waits_for_the_first_and_starts_nothing(first):
    request = _queued_job()
    claims = ClaimStore(shard_id=SHARD, lease_seconds=LEASE)

    def first_claim():
        if first == "claim":
            return claims.claim([request])
        return claims.claim_succeeded([request], handlers=["default"])

    held, seconded = _claim_behind(first_claim, request)

    assert [attempt.job_id for attempt in held["value"]] == [request.job_id]
    assert seconded["value"] == []
    job = Job.objects.using(ALIAS).get(pk=request.job_id)
    assert job.attempts == 1
    assert job.status == ("running" if first == "claim" else "succeeded")


def test_a_job_made_due_again_while_a_claim_waits_is_left_due_for_its_next_dispatch():
    request = _queued_job()

    def make_due_again():  # as a new shard owner does with an older owner's dispatches
        Job.objects.using(ALIAS).filter(pk=request.job_id).update(status="scheduled")

    _, claimed = _claim_behind(make_due_again, request)

    # This message starts nothing; the job is due, for the scheduler to dispatch again.
    assert claimed["value"] == []
    job = Job.objects.using(ALIAS).get(pk=request.job_id)
    assert (job.status, job.attempts) == ("scheduled", 0)
