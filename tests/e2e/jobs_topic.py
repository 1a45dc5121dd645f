"""The test's jobs topic as the executor tests drive it: they publish job messages
themselves (no scheduler), so each message is exactly what the test says, and they know
the executors have dealt with every message once the group's committed offsets reach the
end of each partition: offsets are committed only after a message's outcome is durable.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from django.conf import settings
from django.utils import timezone

from jobsvc.jobs.models import Job
from jobsvc.messaging.job_message import JobMessage
from jobsvc.messaging.producer import BatchProducer
from jobsvc.sharding.ids import shard_of
from jobsvc.sharding.shards import shard_alias
from tests.e2e.conftest import JOBS_PARTITIONS, Messaging
from tests.e2e.jobs import all_jobs, create, spec
from tests.waiting import wait_until

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


# Each job's due time and handler as stored when it was queued here: a message names them
# (a claim checks them), and tests publish some while the job's shard is offline.
_DISPATCHED: dict[str, tuple[datetime, str | None]] = {}


def queued_job(
    user_id: int,
    url: str,
    *,
    attempts: int = 0,
    max_attempts: int | None = None,
    timeout_seconds: float | None = None,
) -> str:
    """An http job as a scheduler leaves it after dispatching attempt ``attempts + 1``."""
    [job_id] = create(
        user_id,
        [
            spec(
                handler="http",
                params={"url": url},
                max_attempts=max_attempts,
                timeout_seconds=timeout_seconds,
            )
        ],
    )
    now = timezone.now()
    Job.objects.using(shard_alias(shard_of(job_id))).filter(pk=job_id).update(
        status="queued",
        attempts=attempts,
        dispatched_at=now,
        lease_expires_at=now + timedelta(minutes=5),
    )
    [stored] = all_jobs(pk=job_id)
    _DISPATCHED[job_id] = (stored.due_at, stored.handler)
    return job_id


def message(job_id: str, user_id: int, *, attempt: int, shard_id: int | None = None) -> bytes:
    """The message a scheduler would publish to start ``attempt`` of the job: with the
    job's due time and handler as stored (a claim checks them), if the job exists."""
    now = timezone.now()
    if job_id not in _DISPATCHED:
        stored = all_jobs(pk=job_id)
        _DISPATCHED[job_id] = (stored[0].due_at, stored[0].handler) if stored else (now, None)
    due_at, handler = _DISPATCHED[job_id]
    return JobMessage(
        job_id=job_id,
        shard_id=shard_of(job_id) if shard_id is None else shard_id,
        user_id=user_id,
        attempt=attempt,
        epoch=1,
        due_at=due_at,
        dispatched_at=now,
        handler=handler,
    ).encode()


def job(job_id: str) -> Job:
    return all_jobs(pk=job_id)[0]
