"""Work stealing: jobs whose messages another group member holds and does not run are
run by an executor that ran out of that user's jobs, each exactly once.

The other member is a plain Kafka consumer in the executors' group: it takes its share of
the partitions, reads their messages and runs none of them, as a stuck executor, or one
far slower than the rest, would. It keeps polling, so the group never takes its
partitions away: only work stealing can run its jobs.
"""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import Consumer
from django.conf import settings

from tests.e2e.conftest import JOBS_PARTITIONS, Messaging
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
