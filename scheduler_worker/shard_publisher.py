"""Publishing a shard's claimed jobs: their messages to the broker, and what it failed back.

A round sends its messages without waiting for the broker: the next round starts at once
(waiting would add the broker's round trip to every job's dispatch). Each job goes to the
partition its claim gave it (``scheduler_worker.partition_deal``). The jobs of messages the
broker failed are made due again at the start of the next round (``release_failed``), or
when the shard goes (``settle``); until then they count as in flight, so a broker that does
not acknowledge stops the claims once the in-flight limit is reached.
"""

from __future__ import annotations

import logging

from django.db import Error as DatabaseError

from jobsvc.messaging.job_message import JobMessage
from jobsvc.messaging.producer import Producer
from scheduler_worker import metrics
from scheduler_worker.acknowledgements import Unacknowledged
from scheduler_worker.dispatch_config import DispatchConfig
from scheduler_worker.dispatch_metrics import observe_dispatched
from scheduler_worker.shard_store import ClaimedJob, ShardStore
from scheduler_worker.weights import weight_of

logger = logging.getLogger(__name__)


class ShardPublisher:
    """Sends one shard's claimed jobs to the broker and keeps what it failed, to release."""

    def __init__(self, *, store: ShardStore, producer: Producer, config: DispatchConfig) -> None:
        self.store = store
        self.producer = producer
        self.config = config
        self._unacknowledged = Unacknowledged()

    def release_failed(self, *, epoch: int | None) -> int:
        """Make the jobs of the messages the broker failed due again (fenced by ``epoch``);
        how many."""
        failed = self._unacknowledged.take_failed()
        if failed:
            try:
                self.store.release(epoch=epoch, job_ids=failed)
            except DatabaseError:
                self._unacknowledged.put_back(failed)  # for the next round
                raise
            metrics.JOBS_RELEASED.inc(len(failed))
            logger.warning(
                "shard %s: %d jobs are due again: the broker did not take their messages",
                self.store.shard_id,
                len(failed),
                extra={"shard": self.store.shard_id, "action": "release"},
            )
        return len(failed)

    def refused(self) -> bool:
        return self._unacknowledged.refused

    def settle(self, timeout: float, *, epoch: int | None) -> None:
        """Before the shard goes: wait for the broker's reports, release what failed."""
        if not self._unacknowledged.wait_reported(timeout):
            logger.warning(
                "shard %s: %d messages still unacknowledged; the next owner sends them again",
                self.store.shard_id,
                self._unacknowledged.count,
            )
        try:
            self.release_failed(epoch=epoch)
        except DatabaseError as exc:
            logger.warning("shard %s: cannot release failed jobs: %s", self.store.shard_id, exc)

    def publish(self, jobs: list[ClaimedJob], weights: dict[int, float], *, epoch: int) -> int:
        """Send a round's claimed jobs; the broker's reports arrive later. How many."""
        if not jobs:
            return 0
        messages = [
            (job.job_id.encode(), self._message(job, weight_of(weights, job.user_id), epoch))
            for job in jobs
        ]
        job_ids = [job.job_id for job in jobs]

        def on_done(failed: list[int]) -> None:
            self._unacknowledged.report(job_ids, failed)
            observe_dispatched(jobs=jobs, failed=set(failed), weights=weights)

        self._unacknowledged.add(len(jobs))
        self.producer.send(
            self.config.topic,
            messages,
            on_done=on_done,
            timeout=self.config.publish_timeout,
            partitions=[job.partition for job in jobs],
        )
        return len(jobs)

    def _message(self, job: ClaimedJob, weight: float, epoch: int) -> bytes:
        return JobMessage(
            job_id=job.job_id,
            shard_id=self.store.shard_id,
            user_id=job.user_id,
            attempt=job.attempts + 1,
            epoch=epoch,
            due_at=job.due_at,
            dispatched_at=job.dispatched_at,
            weight=weight,
            priority=job.priority,
            handler=job.handler,
        ).encode()
