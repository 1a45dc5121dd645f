"""Work stealing: jobs whose messages another group member holds and does not run are
run by an executor that ran out of that user's jobs, each exactly once; and the member
whose jobs were taken still starts its users' jobs in their shares.

The other member is a plain Kafka consumer in the executors' group: it takes its share of
the partitions, reads their messages and runs none of them, as a stuck executor, or one
far slower than the rest, would. It keeps polling, so the group never takes its
partitions away: only work stealing can run its jobs.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from confluent_kafka import Consumer
from django.conf import settings
from django.utils import timezone

from jobsvc.jobs.models import Job
from jobsvc.sharding.shards import shard_aliases
from tests.e2e.conftest import JOBS_PARTITIONS, Messaging
from tests.e2e.jobs import all_jobs, create, spec
from tests.e2e.jobs_topic import HANDLED_TIMEOUT, job, message, queued_job
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

JOBS = 400  # one user's, spread over the partitions by key (about 100 each)


class IdleMember:
    """A member of the executors' group that holds its partitions and handles nothing."""

    def __init__(self, messaging: Messaging) -> None:
        self.assigned: frozenset[int] = frozenset()
        self.read = 0
        self._stop = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": settings.KAFKA_BOOTSTRAP,
                "group.id": messaging.group_id,
                "client.id": "idle-member",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 1000,
            }
        )
        self._consumer.subscribe([messaging.jobs_topic], on_assign=self._on_assign)
        self._thread = threading.Thread(target=self._poll, name="idle-member", daemon=True)
        self._thread.start()

    def _on_assign(self, consumer, partitions) -> None:
        self.assigned = frozenset(p.partition for p in partitions)

    def _poll(self) -> None:
        while not self._stop.is_set():
            if self._consumer.poll(0.1) is not None:
                self.read += 1

    def close(self) -> None:
        """Leave the group: the executors then read its partitions themselves."""
        self._stop.set()
        self._thread.join(timeout=10)
        self._consumer.close()


@pytest.fixture
def idle_member(messaging):
    member = IdleMember(messaging)
    yield member
    if not member._stop.is_set():
        member.close()


def test_an_executor_runs_the_jobs_a_member_that_runs_nothing_holds(
    make_user, start_worker, receiver, jobs_topic, idle_member
):
    user = make_user()
    start_worker("executor", "executor-a")
    half = JOBS_PARTITIONS // 2
    wait_until(
        lambda: len(idle_member.assigned) == half,
        timeout=HANDLED_TIMEOUT,
        what="the executor joined the group and took half the partitions",
    )
    job_ids = [queued_job(user.pk, receiver.url) for _ in range(JOBS)]
    jobs_topic.publish(*[(j, message(j, user.pk, attempt=1)) for j in job_ids])
    # The idle member reads its partitions' messages (it just never handles them).
    wait_until(lambda: idle_member.read > 0, timeout=HANDLED_TIMEOUT, what="idle member read")

    wait_until(
        lambda: len(receiver.count_by_job()) == JOBS,
        timeout=HANDLED_TIMEOUT,
        what="every job's webhook received, those the idle member holds too",
    )
    assert len(idle_member.assigned) == half  # it kept its partitions all along
    assert receiver.count_by_job() == dict.fromkeys(job_ids, 1)

    # Once the member leaves, the executor reads the messages it held and drops them:
    # their jobs ran already.
    idle_member.close()
    jobs_topic.wait_until_all_handled()
    assert receiver.count_by_job() == dict.fromkeys(job_ids, 1)
    assert {(job(j).status, job(j).attempts) for j in job_ids} == {("succeeded", 1)}


def test_jobs_another_executor_started_first_do_not_cost_their_user_its_share(
    make_user, start_worker, jobs_topic
):
    """Half of one user's jobs were started by another executor (its work stealing)
    before this one, which holds their messages, takes them in fair order: those turns
    did not start anything, and are given back. So the two weight-1 users' jobs still
    start one for one here: the robbed user's last job starts when the steady user has
    had about as many (100), not all of its own (200: the robbed user lost half its
    turns before the refund; so did the weight-4 user of 1:2:4 on the executor stolen
    from, which gave it as little as 0.49 of its starts near its run-out, for 0.571)."""
    steady, robbed = make_user(), make_user()
    per_user = 200
    steady_ids = create(steady.pk, [spec() for _ in range(per_user)])
    robbed_ids = create(robbed.pk, [spec() for _ in range(per_user)])
    started_elsewhere, startable = robbed_ids[::2], robbed_ids[1::2]
    now = timezone.now()
    for alias in shard_aliases():
        jobs = Job.objects.using(alias)
        jobs.filter(pk__in=steady_ids + startable).update(
            status="queued", dispatched_at=now, lease_expires_at=now + timedelta(minutes=5)
        )
        jobs.filter(pk__in=started_elsewhere).update(
            status="succeeded", attempts=1, started_at=now, finished_at=now, dispatched_at=now
        )
    records = []
    for steady_id, robbed_id in zip(steady_ids, robbed_ids, strict=True):
        records.append((steady_id, message(steady_id, steady.pk, attempt=1)))
        records.append((robbed_id, message(robbed_id, robbed.pk, attempt=1)))
    jobs_topic.publish(*records)  # all of them before the executor reads any

    # Small turns: the started_at of a claim is its transaction's, so the order in which
    # the two users' jobs start shows only across many claims.
    start_worker("executor", "executor-a", env={"JOBSVC_EXECUTOR_CLAIM_BATCH": "10"})
    jobs_topic.wait_until_all_handled()

    started = {j.id: j for j in all_jobs(pk__in=steady_ids + robbed_ids)}
    assert {(started[j].status, started[j].attempts) for j in steady_ids + startable} == {
        ("succeeded", 1)
    }
    assert all(started[j].started_at == now for j in started_elsewhere)  # not run again
    robbed_done = max(started[j].started_at for j in startable)
    steady_by_then = sum(started[j].started_at <= robbed_done for j in steady_ids)
    # One for one: about 100 (a turn or two more); without the refund, about 200.
    assert steady_by_then <= len(startable) + 30, steady_by_then
