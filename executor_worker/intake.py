"""What an executor reads: messages from its partitions, decoded, held until they are due.

The intake owns the consumer. Each ``read`` polls what the broker has for this executor's
partitions (at once, or waiting up to a timeout for the first message), up to ``room``
messages: the schedulers' in-flight limits bound what is there to read, and ``room`` (the
read-ahead left) bounds it here. A message that does not decode is logged and acknowledged,
never retried forever. Schedulers publish a job up to a second before its due time, so a
job read early is held (``NOT_DUE``) until it is due by its shard database's clock
(``ShardClocks``): never before, whatever this machine's clock says.

A message is acknowledged (its offset may be committed) only through ``acknowledge``, once
its job is done: at-least-once, see ``executor_worker.consumer``.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections.abc import Callable, Collection, Iterable

from executor_worker import metrics
from executor_worker.consumer import JobConsumer, Received
from executor_worker.jobs import HeldJob, JobState
from jobsvc.messaging.job_message import JobMessage, MalformedJobMessage
from jobsvc.sharding.shards import UnknownShard, shard_alias

logger = logging.getLogger(__name__)

_POLLS_PER_READ = 8  # polls of ``batch_size`` a read makes at most while messages come


class Intake:
    def __init__(
        self,
        *,
        consumer: JobConsumer,
        batch_size: int,
        inline_handlers: Collection[str],
        due_time: Callable[[JobMessage], float],
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``due_time``: when a message's job is due, on ``clock`` (this machine's
        ``time.time()``; the due time corrected by the shard's clock offset: ``ShardClocks``)."""
        self.consumer = consumer
        self.batch_size = batch_size
        self._inline = frozenset(inline_handlers)
        self._due_time = due_time
        self._clock = clock
        self._not_due: list[tuple[float, int, HeldJob]] = []  # (due time, seq, job)
        self._seq = itertools.count()

    def __len__(self) -> int:
        """Jobs held until they are due."""
        return len(self._not_due)

    def read(self, *, room: int, timeout: float) -> list[HeldJob]:
        """Poll up to ``room`` messages (waiting up to ``timeout`` s for the first); hold
        those not due yet; return the jobs due now, read or held, in that order. "Now" is
        after the polls: a held job that came due while the first poll waited comes out."""
        self.consumer.pause_all(room <= 0)  # paused, a poll only waits
        batches: list[list[Received]] = []
        for poll in range(_POLLS_PER_READ):
            if room <= 0:
                break
            batch = self.consumer.poll_batch(
                max_messages=min(room, self.batch_size), timeout=0.0 if poll else timeout
            )
            room -= len(batch)
            batches.append(batch)
            if len(batch) < self.batch_size:
                break  # the client has no more for now
        now = self._clock()
        due = [job for batch in batches for job in self._admit(batch, now)]
        return due + self.release_due(now)

    def release_due(self, now: float) -> list[HeldJob]:
        """The held jobs due at ``now``, earliest first."""
        released: list[HeldJob] = []
        while self._not_due and self._not_due[0][0] <= now:
            job = heapq.heappop(self._not_due)[2]
            job.state = JobState.WAITING
            released.append(job)
        return released

    def hold(self, jobs: Iterable[HeldJob], *, not_before: float = 0.0) -> None:
        """Hold these until they are due, and not before ``not_before`` (``time.time()``:
        a claim found them not due by the database, so the clock offset was off)."""
        for job in jobs:
            job.state = JobState.NOT_DUE
            due = max(self._due_time(job.message), not_before)
            heapq.heappush(self._not_due, (due, next(self._seq), job))

    def next_due(self) -> float | None:
        """When the earliest held job is due (``time.time()``), None if none is held."""
        return self._not_due[0][0] if self._not_due else None

    def acknowledge(self, jobs: Iterable[HeldJob]) -> None:
        """These jobs are done: their messages' offsets may be committed."""
        received = []
        for job in jobs:
            job.state = JobState.DONE
            received.append(job.received)
        self.consumer.handled(*received)

    def drop_held(self) -> None:
        """Forget the jobs held until due (shutting down: they are read again elsewhere)."""
        self._not_due.clear()

    def _admit(self, batch: list[Received], now: float) -> list[HeldJob]:
        due: list[HeldJob] = []
        malformed: list[Received] = []
        for received in batch:
            try:
                message = JobMessage.decode(received.value)
                shard_alias(message.shard_id)  # a shard this deployment has
            except (MalformedJobMessage, UnknownShard) as exc:
                logger.warning(
                    "dropping a malformed message at %s/%s: %s",
                    received.partition,
                    received.offset,
                    exc,
                )
                malformed.append(received)
                continue
            job = HeldJob(
                message=message, received=received, inline=message.handler in self._inline
            )
            if self._due_time(message) <= now:
                due.append(job)
            else:
                self.hold([job])
        if malformed:
            metrics.JOBS_PROCESSED.labels("malformed").inc(len(malformed))
            self.consumer.handled(*malformed)
        return due
