"""The claimer against a real shard: one transaction per shard; inline handlers run in it;
each attempt starts once, however many of its messages a claim is given."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from executor_worker.claimer import Claimer
from executor_worker.claims import ClaimStore
from executor_worker.jobs import HeldJob
from executor_worker.runner import AttemptRunner
from executor_worker.shard_backoff import ShardBackoff
from jobsvc.handlers.registry import HandlerRegistry
from jobsvc.jobs import store
from jobsvc.jobs.models import Job
from jobsvc.jobs.specs import JobSpec
from jobsvc.messaging.job_message import JobMessage
from jobsvc.sharding.ids import new_job_id
from jobsvc.sharding.shards import shard_alias
from tests.unit.job_messages import received_job

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

SHARD = 2
ALIAS = shard_alias(SHARD)


class SlowHandler:
    """A handler that needs a thread (not inline); never run here."""

    def validate_params(self, params) -> dict:
        return params

    def handle(self, job) -> None:
        raise AssertionError("thread jobs are run by the pool, not the claimer")


def _claimer() -> Claimer:
    registry = HandlerRegistry(
        {
            "default": "jobsvc.handlers.record.RecordHandler",
            "slow": "tests.integration.test_claimer.SlowHandler",
        }
    )
    runner = AttemptRunner(registry=registry, retry_base_delay=1.0, retry_max_delay=1.0)
    return Claimer(
        stores=lambda shard: ClaimStore(shard_id=shard, lease_seconds=5.0),
        runner=runner,
        backoff=ShardBackoff(first_delay=0.1, max_delay=1.0),
    )


def _held(handler: str, *, due_in: float = -1.0) -> HeldJob:
    now = timezone.now()
    spec = JobSpec(
        message="m",
        execute_at=now + timedelta(seconds=due_in),
        max_attempts=3,
        timeout_seconds=10.0,
        handler=handler,
        handler_params={},
    )
    job_id = new_job_id(shard_id=SHARD, at=now)
    row = store.new_job_row(job_id=job_id, user_id=7, spec=spec, shard_id=SHARD, now=now)
    store.insert_jobs(ALIAS, [row])
    Job.objects.using(ALIAS).filter(pk=job_id).update(status="queued")
    job = Job.objects.using(ALIAS).get(pk=job_id)
    message = JobMessage.decode(received_job(7, shard=SHARD, handler=handler).value)
    message = message._replace(job_id=job_id, due_at=job.due_at)
    return HeldJob(message=message, received=received_job(7), inline=handler == "default")


def test_two_messages_of_one_attempt_in_one_claim_start_it_once():
    inline, threaded = _held("default"), _held("slow")
    copies = [inline, _copy(inline), threaded, _copy(threaded)]

    claimed = _claimer().claim(copies, threads=4)

    assert [job for job, _ in claimed.succeeded] == [inline]
    assert [job for job, _ in claimed.started] == [threaded]
    assert sorted(map(id, claimed.dropped)) == sorted([id(copies[1]), id(copies[3])])


def test_a_job_not_due_by_the_database_is_handed_back_with_its_due_time():
    early = _held("default", due_in=30.0)

    claimed = _claimer().claim([early], threads=0)

    [(job, due)] = claimed.not_due
    assert job is early and due == pytest.approx(early.message.due_at.timestamp())


def test_thread_jobs_beyond_the_idle_threads_go_back_in_line():
    jobs = [_held("slow") for _ in range(3)]

    claimed = _claimer().claim(jobs, threads=2)

    assert [job for job, _ in claimed.started] == jobs[:2]
    assert claimed.requeued == jobs[2:]


def _copy(job: HeldJob) -> HeldJob:
    return HeldJob(message=job.message, received=received_job(7), inline=job.inline)
