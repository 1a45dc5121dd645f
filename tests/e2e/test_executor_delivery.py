"""What an executor does with the messages on the jobs topic, whatever they are.

These tests publish job messages themselves (no scheduler), so each message is exactly
what the test says: a duplicate, a stale attempt, one for a cancelled job, or garbage.
A test knows the executor has dealt with every message once the group's committed
offsets reach the end of each partition (found by reading the test's messages back):
offsets are committed only after a message's outcome is durable.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from django.conf import settings
from django.utils import timezone

from jobsvc.jobs.models import Job
from jobsvc.jobs.services import job_cancel
from jobsvc.messaging.job_message import JobMessage
from jobsvc.messaging.producer import BatchProducer
from jobsvc.sharding.ids import shard_of
from jobsvc.sharding.shards import shard_alias
from tests.e2e.conftest import JOBS_PARTITIONS, Messaging
from tests.e2e.jobs import all_jobs, create, spec
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

PUBLISH_TIMEOUT = 10.0  # seconds for the broker to acknowledge what a test publishes
HANDLED_TIMEOUT = 30.0  # seconds for an executor to join the group and handle everything


class JobsTopic:
    """Publishes to the test's jobs topic and tells when the executors handled it all."""

    def __init__(self, messaging: Messaging) -> None:
        self.topic = messaging.jobs_topic
        self.producer = BatchProducer(bootstrap=settings.KAFKA_BOOTSTRAP, client_id="e2e-test")
        # Never subscribes: it only reads the executors' group's committed offsets.
        self.offsets = Consumer(
            {
                "bootstrap.servers": settings.KAFKA_BOOTSTRAP,
                "group.id": messaging.group_id,
                "enable.auto.commit": False,
            }
        )
        self.partitions = [TopicPartition(self.topic, p) for p in range(JOBS_PARTITIONS)]
        self.published = 0
        self._ends: dict[int, int] = {}  # partition -> offset after this test's last message
        self._ends_of = 0  # how many published messages _ends accounts for

    def publish(self, *records: tuple[str, bytes | None]) -> None:
        """(key, value) records, in order; the same key means the same partition."""
        messages = [(key.encode(), value) for key, value in records]
        assert self.producer.publish(self.topic, messages, timeout=PUBLISH_TIMEOUT) == []
        self.published += len(messages)

    def all_handled(self) -> bool:
        ends = self.ends()
        committed = self.offsets.committed(self.partitions, timeout=10)
        return all(max(p.offset, 0) >= ends.get(p.partition, 0) for p in committed)

    def ends(self) -> dict[int, int]:
        """Where each partition ends, read back: the test broker's high watermark counts
        batches, not messages."""
        if self._ends_of == self.published:
            return self._ends
        reader = Consumer(
            {
                "bootstrap.servers": settings.KAFKA_BOOTSTRAP,
                "group.id": f"e2e-reader-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
            }
        )
        try:
            reader.assign(
                [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(JOBS_PARTITIONS)]
            )
            ends: dict[int, int] = {}
            seen = 0
            deadline = time.monotonic() + PUBLISH_TIMEOUT
            while seen < self.published:
                assert time.monotonic() < deadline, f"read back {seen} of {self.published}"
                record = reader.poll(0.2)
                if record is not None and record.error() is None:
                    ends[record.partition()] = record.offset() + 1
                    seen += 1
        finally:
            reader.close()
        self._ends, self._ends_of = ends, seen
        return ends

    def wait_until_all_handled(self) -> None:
        wait_until(self.all_handled, timeout=HANDLED_TIMEOUT, what="every message handled")

    def close(self) -> None:
        self.producer.close()
        self.offsets.close()


@pytest.fixture
def jobs_topic(messaging) -> Iterator[JobsTopic]:
    topic = JobsTopic(messaging)
    yield topic
    topic.close()


def queued_job(user_id: int, url: str, *, attempts: int = 0) -> str:
    """An http job as a scheduler leaves it after dispatching attempt ``attempts + 1``."""
    [job_id] = create(user_id, [spec(handler="http", params={"url": url})])
    now = timezone.now()
    Job.objects.using(shard_alias(shard_of(job_id))).filter(pk=job_id).update(
        status="queued",
        attempts=attempts,
        dispatched_at=now,
        lease_expires_at=now + timedelta(minutes=5),
    )
    return job_id


def message(job_id: str, user_id: int, *, attempt: int, shard_id: int | None = None) -> bytes:
    now = timezone.now()
    return JobMessage(
        job_id=job_id,
        shard_id=shard_of(job_id) if shard_id is None else shard_id,
        user_id=user_id,
        attempt=attempt,
        epoch=1,
        due_at=now,
        dispatched_at=now,
    ).encode()


def job(job_id: str) -> Job:
    return all_jobs(pk=job_id)[0]


def test_a_duplicate_message_runs_the_handler_once(make_user, start_worker, receiver, jobs_topic):
    user = make_user()
    job_id = queued_job(user.pk, receiver.url)
    first = message(job_id, user.pk, attempt=1)
    jobs_topic.publish((job_id, first), (job_id, first))

    start_worker("executor", "executor-a")
    jobs_topic.wait_until_all_handled()

    assert [d.idempotency_key for d in receiver.of(job_id)] == [f"{job_id}:1"]
    assert (job(job_id).status, job(job_id).attempts) == ("succeeded", 1)


def test_a_message_of_an_attempt_that_already_ran_is_dropped(
    make_user, start_worker, receiver, jobs_topic
):
    user = make_user()
    job_id = queued_job(user.pk, receiver.url)
    jobs_topic.publish((job_id, message(job_id, user.pk, attempt=1)))
    start_worker("executor", "executor-a")
    wait_until(lambda: job(job_id).status == "succeeded", timeout=HANDLED_TIMEOUT, what="ran")
    finished_at = job(job_id).finished_at

    jobs_topic.publish((job_id, message(job_id, user.pk, attempt=1)))
    jobs_topic.wait_until_all_handled()

    assert len(receiver.of(job_id)) == 1
    ran = job(job_id)
    assert (ran.status, ran.attempts, ran.finished_at) == ("succeeded", 1, finished_at)


def test_a_stale_attempt_does_not_run_in_place_of_the_current_one(
    make_user, start_worker, receiver, jobs_topic
):
    """Attempt 1's message turns up again while the job waits for its attempt 2."""
    user = make_user()
    job_id = queued_job(user.pk, receiver.url, attempts=1)
    jobs_topic.publish((job_id, message(job_id, user.pk, attempt=1)))
    start_worker("executor", "executor-a")
    jobs_topic.wait_until_all_handled()
    assert receiver.of(job_id) == []
    assert (job(job_id).status, job(job_id).attempts) == ("queued", 1)

    jobs_topic.publish((job_id, message(job_id, user.pk, attempt=2)))
    wait_until(lambda: job(job_id).status == "succeeded", timeout=HANDLED_TIMEOUT, what="ran")

    assert [d.idempotency_key for d in receiver.of(job_id)] == [f"{job_id}:2"]
    assert job(job_id).attempts == 2


def test_a_job_cancelled_after_publication_never_runs(
    make_user, start_worker, receiver, jobs_topic
):
    user = make_user()
    job_id = queued_job(user.pk, receiver.url)
    jobs_topic.publish((job_id, message(job_id, user.pk, attempt=1)))
    job_cancel(user_id=user.pk, job_id=job_id)

    start_worker("executor", "executor-a")
    jobs_topic.wait_until_all_handled()

    assert receiver.of(job_id) == []
    cancelled = job(job_id)
    assert (cancelled.status, cancelled.attempts, cancelled.started_at) == ("cancelled", 0, None)


def test_garbage_on_the_jobs_topic_does_not_stop_the_valid_job_behind_it(
    make_user, start_worker, receiver, jobs_topic
):
    user = make_user()
    job_id = queued_job(user.pk, receiver.url)
    valid = json.loads(message(job_id, user.pk, attempt=1))
    garbage = [
        b"not json at all",
        b"\xff\xfe\x00\x01",
        None,  # a tombstone: no value
        b"[]",
        json.dumps({**valid, "v": 2}).encode(),
        json.dumps({**valid, "attempt": "1"}).encode(),
        json.dumps({**valid, "due_at": "yesterday"}).encode(),
        message(job_id, user.pk, attempt=1, shard_id=99),
        message(job_id, user.pk, attempt=1, shard_id=-1),
        # Well-formed, but values PostgreSQL cannot take: these must not poison the claim.
        json.dumps({**valid, "job_id": "nul\u0000byte"}).encode(),
        json.dumps({**valid, "attempt": 2**31}).encode(),
        json.dumps({**valid, "job_id": "x" * 10_000}).encode(),
    ]
    # One key: every record lands in the valid job's partition, in front of it.
    jobs_topic.publish(*[(job_id, value) for value in garbage])
    jobs_topic.publish((job_id, message(job_id, user.pk, attempt=1)))

    executor = start_worker("executor", "executor-a")
    jobs_topic.wait_until_all_handled()

    assert executor.alive()
    assert [d.idempotency_key for d in receiver.of(job_id)] == [f"{job_id}:1"]
    assert job(job_id).status == "succeeded"
