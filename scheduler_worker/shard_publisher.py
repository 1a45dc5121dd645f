"""Publishing a shard's claimed jobs: their messages to the broker, and what it failed back.

A round sends its messages without waiting for the broker: the next round starts at once
(waiting would add the broker's round trip, tens of milliseconds, to every job's
dispatch). At most ``_UNACKNOWLEDGED_ROUNDS`` rounds' worth of messages wait for
acknowledgement at once (``room``). The jobs of messages the broker failed are made due
again at the start of the next round (``release_failed``), or when the shard goes
(``settle``).

Within a round the jobs go users interleaved by weight and dealt over a few partitions,
each user's over them in turn from round to round (``scheduler_worker.partition_deal``);
the jobs of a user with fewer than a few in flight on the shard go to the express topic
instead (``scheduler_worker.express_lane``), which executors read ahead of the jobs
topic.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from django.db import Error as DatabaseError

from jobsvc.messaging.job_message import JobMessage
from jobsvc.messaging.producer import Producer
from scheduler_worker import metrics
from scheduler_worker.acknowledgements import Unacknowledged
from scheduler_worker.dispatch_config import DispatchConfig
from scheduler_worker.dispatch_metrics import observe_dispatched
from scheduler_worker.express_lane import express_jobs
from scheduler_worker.fair_share import weight_of
from scheduler_worker.partition_deal import PartitionDealer
from scheduler_worker.shard_store import ClaimedJob, ShardStore

logger = logging.getLogger(__name__)

_UNACKNOWLEDGED_ROUNDS = 2  # full rounds of messages that may await acknowledgement


class ShardPublisher:
    """Sends one shard's claimed jobs to the broker and keeps what it failed to release.

    ``publish`` and ``send_express`` may run on different threads (a round's and the due
    listener's); the count of messages awaiting acknowledgement is shared and locked.
    """

    def __init__(self, *, store: ShardStore, producer: Producer, config: DispatchConfig) -> None:
        self.store = store
        self.producer = producer
        self.config = config
        self._shard_label = str(store.shard_id)
        self._unacknowledged = Unacknowledged()
        self._dealer = PartitionDealer()

    def express_available(self) -> bool:
        """Whether jobs may go express: a topic configured that the broker has, and an
        in-flight limit (without one, nothing is counted)."""
        return bool(
            self.config.express_topic
            and self.config.max_in_flight
            and self.producer.partition_count(self.config.express_topic)
        )

    def room(self, round_size: int) -> int:
        """Jobs a round of ``round_size`` may publish as far as the broker goes: a round's
        worth, less what it has not acknowledged yet beyond ``_UNACKNOWLEDGED_ROUNDS``
        such rounds; 0 after waiting up to a poll interval for the broker to catch up."""
        limit = _UNACKNOWLEDGED_ROUNDS * round_size
        if not self._unacknowledged.wait_below(limit, self.config.poll_interval):
            return 0
        return min(round_size, limit - self._unacknowledged.count)

    def release_failed(self, *, epoch: int | None) -> None:
        """Make the jobs of the messages the broker failed due again (fenced by ``epoch``)."""
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

    def settle(self, timeout: float, *, epoch: int | None) -> None:
        """Before the shard goes: wait for the broker's reports, release what failed."""
        if not self._unacknowledged.wait_below(1, timeout):
            logger.warning(
                "shard %s: %d messages still unacknowledged; the sweeper will recover them",
                self.store.shard_id,
                self._unacknowledged.count,
            )
        try:
            self.release_failed(epoch=epoch)
        except DatabaseError as exc:
            logger.warning("shard %s: cannot release failed jobs: %s", self.store.shard_id, exc)

    def publish(
        self,
        claimed: list[ClaimedJob],
        weights: dict[int, float],
        *,
        in_flight: dict[int, int],
        epoch: int,
    ) -> int:
        """Send a round's claimed jobs; the broker's reports arrive later. The jobs of
        users with few ``in_flight`` go to the express topic, if the broker has it (and
        only under an in-flight limit: without one, nothing is counted)."""
        if not claimed:
            return 0
        express: list[ClaimedJob] = []
        if self.express_available():
            express = express_jobs(claimed, in_flight=in_flight)
        if express:
            chosen = {job.job_id for job in express}
            claimed = [job for job in claimed if job.job_id not in chosen]
            self.send_express(express, weights, epoch=epoch)
        if not claimed:
            return len(express)
        by_user: dict[int, list[ClaimedJob]] = defaultdict(list)
        for job in claimed:
            by_user[job.user_id].append(job)
        ordered, partitions = self._dealer.in_send_order(
            by_user, weights, self.producer.partition_count(self.config.topic)
        )
        self._send(self.config.topic, ordered, weights, partitions=partitions, epoch=epoch)
        return len(express) + len(ordered)

    def send_express(
        self, jobs: list[ClaimedJob], weights: dict[int, float], *, epoch: int
    ) -> None:
        self._send(self.config.express_topic, jobs, weights, partitions=None, epoch=epoch)
        metrics.JOBS_EXPRESS.labels(self._shard_label).inc(len(jobs))

    def _send(
        self,
        topic: str,
        jobs: list[ClaimedJob],
        weights: dict[int, float],
        *,
        partitions: list[int] | None,
        epoch: int,
    ) -> None:
        messages = [
            (
                job.job_id.encode(),
                self._message(job, weight_of(weights, job.user_id), epoch).encode(),
            )
            for job in jobs
        ]
        job_ids = [job.job_id for job in jobs]

        def on_done(failed: list[int]) -> None:
            self._unacknowledged.report(job_ids, failed)
            observe_dispatched(jobs=jobs, failed=set(failed), weights=weights)

        self._unacknowledged.add(len(jobs))
        self.producer.send(
            topic,
            messages,
            on_done=on_done,
            timeout=self.config.publish_timeout,
            partitions=partitions,
        )

    def _message(self, job: ClaimedJob, weight: float, epoch: int) -> JobMessage:
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
        )
