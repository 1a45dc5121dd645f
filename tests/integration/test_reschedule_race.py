"""A reschedule racing a scheduler's dispatch claim: the job runs at the new time, or it was
dispatched and the reschedule is refused; never both, never neither.

The claim is the scheduler's own (``ShardStore.claim``: PICK_FOR_DISPATCH, then CLAIM_PICKED) and
the reschedule the API's service, each in its own session, committing in either order.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from jobsvc import errors
from jobsvc.jobs import store
from jobsvc.jobs.changes import job_reschedule
from jobsvc.jobs.models import Job
from jobsvc.jobs.specs import JobSpec, RescheduleSpec
from jobsvc.sharding.ids import new_job_id
from jobsvc.sharding.shards import shard_alias
from scheduler_worker.shard_store import ShardStore
from tests.integration.threads import held_open, in_thread, someone_waits_for_a_lock
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

SHARD = 1
ALIAS = shard_alias(SHARD)
USER = 4242
QUEUED_TIMEOUT = 90.0


@pytest.fixture
def shard() -> Iterator[ShardStore]:
    shard_store = ShardStore(alias=ALIAS, shard_id=SHARD)
    yield shard_store
    shard_store.close()


def _due_jobs(count: int) -> list[str]:
    now = timezone.now()
    spec = JobSpec(
        message="original",
        execute_at=now - timedelta(seconds=5),
        max_attempts=3,
        timeout_seconds=30.0,
    )
    rows = [
        store.new_job_row(
            job_id=new_job_id(shard_id=SHARD, at=now),
            user_id=USER,
            spec=spec,
            shard_id=SHARD,
            now=now,
        )
        for _ in range(count)
    ]
    store.insert_jobs(ALIAS, rows)
    return [row.id for row in rows]


def _later() -> RescheduleSpec:
    return RescheduleSpec(execute_at=timezone.now() + timedelta(hours=1), message="moved")


def test_a_reschedule_first_moves_the_job_and_the_claim_skips_it_without_waiting(shard):
    (job_id,) = _due_jobs(1)
    epoch = shard.acquire_lease(owner="race-test")
    inside, release = threading.Event(), threading.Event()
    change = _later()

    rescheduler, rescheduled = in_thread(
        held_open(
            lambda: job_reschedule(user_id=USER, job_id=job_id, change=change),
            inside,
            release,
            using=ALIAS,
        )
    )
    assert inside.wait(timeout=30)
    claimer, claimed = in_thread(
        lambda: shard.claim(epoch=epoch, quotas={USER: 10}, queued_timeout=QUEUED_TIMEOUT)
    )
    claimer.join(timeout=30)  # it skips the row the reschedule holds: it does not wait
    assert not claimer.is_alive(), "the claim waited for the row"
    release.set()
    rescheduler.join(timeout=30)

    assert "error" not in rescheduled, rescheduled
    assert claimed["value"] == []
    job = Job.objects.using(ALIAS).get(pk=job_id)
    assert (job.status, job.message, job.due_at) == ("scheduled", "moved", change.execute_at)


def test_a_claim_first_dispatches_the_job_and_the_reschedule_is_refused(shard):
    (job_id,) = _due_jobs(1)
    epoch = shard.acquire_lease(owner="race-test")
    inside, release = threading.Event(), threading.Event()

    claimer, claimed = in_thread(
        held_open(
            lambda: shard.claim(epoch=epoch, quotas={USER: 10}, queued_timeout=QUEUED_TIMEOUT),
            inside,
            release,
            using=ALIAS,
        )
    )
    assert inside.wait(timeout=30)
    rescheduler, rescheduled = in_thread(
        lambda: job_reschedule(user_id=USER, job_id=job_id, change=_later())
    )
    wait_until(
        lambda: someone_waits_for_a_lock(ALIAS), timeout=30, what="the reschedule waits for the row"
    )
    release.set()
    claimer.join(timeout=30)
    rescheduler.join(timeout=30)

    assert [job.job_id for job in claimed["value"]] == [job_id]
    assert isinstance(rescheduled.get("error"), errors.JobNotReschedulable), rescheduled
    job = Job.objects.using(ALIAS).get(pk=job_id)
    assert (job.status, job.message) == ("queued", "original")


def test_racing_freely_every_job_is_either_dispatched_or_moved_never_both(shard):
    ids = _due_jobs(300)
    epoch = shard.acquire_lease(owner="race-test")
    start = threading.Barrier(2)
    moved: set[str] = set()
    refused: set[str] = set()

    def reschedule_all() -> None:
        start.wait(timeout=30)
        for job_id in reversed(ids):  # from the end, so the two meet in the middle
            try:
                job_reschedule(user_id=USER, job_id=job_id, change=_later())
                moved.add(job_id)
            except errors.JobNotReschedulable:
                refused.add(job_id)

    def claim_in_rounds(done: threading.Event) -> set[str]:
        start.wait(timeout=30)
        got: set[str] = set()
        while True:  # until the reschedules are over and nothing is left due
            finished = done.is_set()
            claimed = shard.claim(epoch=epoch, quotas={USER: 10}, queued_timeout=QUEUED_TIMEOUT)
            got |= {job.job_id for job in claimed}
            if finished and not claimed:
                return got

    done = threading.Event()
    rescheduler, outcome = in_thread(lambda: (reschedule_all(), done.set()))
    dispatched = claim_in_rounds(done)
    rescheduler.join(timeout=60)

    assert "error" not in outcome, outcome
    assert moved.isdisjoint(dispatched)
    assert moved | dispatched == set(ids)
    assert refused <= dispatched
    jobs = {job.id: job for job in Job.objects.using(ALIAS).filter(pk__in=ids)}
    assert {jobs[job_id].status for job_id in dispatched} == {"queued"}
    assert {jobs[job_id].message for job_id in dispatched} == {"original"}
    assert {(jobs[job_id].status, jobs[job_id].message) for job_id in moved} <= {
        ("scheduled", "moved")
    }
