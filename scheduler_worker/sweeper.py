"""Sweeping one shard: jobs whose message or executor was lost, and what has expired.

The shard's dispatcher runs a sweep on its own thread before a round, every
``sweep_interval`` seconds, under its lease epoch. One sweep (``ShardSweeper.sweep``):

1. sets the shard's queue lag gauge (the oldest due, unstarted job's age), then makes due
   again queued jobs whose lease expired (their message was lost or nobody claimed it:
   "unclaimed") and running jobs whose executor's lease expired while attempts remain
   ("abandoned": the executor died, paused or was cut off; it renews what it runs);
2. fails running jobs whose executor died on their last attempt ("exhausted"), each only
   once the broker acknowledged its dead letter: one that was not stays running, and the
   next sweep tries again.

Every ``MAINTENANCE_INTERVAL`` seconds a sweep also:

3. sets the shard's due backlog gauge;
4. commits or rolls back the prepared transactions that spread bulk requests left on the
   shard (``jobsvc.jobs.spread.resolve_prepared``: their API process or connection died
   between the two phases), once ``SWEEP_GRACE`` old;
5. deletes up to ``PURGED_PER_SWEEP`` expired Idempotency-Keys (``IDEMPOTENCY_KEY_TTL``),
   as many spread bulk requests' decisions past ``DECISION_RETENTION``, and as many
   finished jobs past ``JOB_RETENTION`` (when set).

Steps 1 and 2 are fenced by the epoch, like the dispatcher's writes; the purges are not (a
row past its time is gone whoever deletes it), nor is step 4 (any two sweeps reach the
same decision: the coordinator's row decides). A sweep that raises stays due, so the
dispatcher's next round tries it again.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from django.conf import settings
from django.utils import timezone

from jobsvc.jobs import spread
from jobsvc.messaging.dead_letter import DeadLetter, Publisher, dead_letters_publish
from scheduler_worker import metrics
from scheduler_worker.queries import LOST_ATTEMPT_ERROR
from scheduler_worker.shard_store import AbandonedJob, ShardStore

logger = logging.getLogger(__name__)

MAINTENANCE_INTERVAL = 10.0  # seconds between the steps 3-5 of a shard's sweeps
# Finished jobs past their retention, and expired Idempotency-Keys, deleted per shard per
# maintenance: each 1,000/s per shard, above the design's 5M jobs an hour.
PURGED_PER_SWEEP = 10_000


class ShardSweeper:
    def __init__(
        self,
        *,
        store: ShardStore,
        producer: Publisher,
        dead_letter_topic: str,
        publish_timeout: float,  # seconds for the broker to acknowledge a dead letter
        sweep_interval: float,  # seconds between sweeps
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self.producer = producer
        self.dead_letter_topic = dead_letter_topic
        self.publish_timeout = publish_timeout
        self.sweep_interval = sweep_interval
        self.clock = clock
        self._next_sweep = 0.0
        self._next_maintenance = 0.0

    def is_due(self) -> bool:
        """``sweep_interval`` seconds have passed since the last sweep that completed (the
        first sweep is due at once)."""
        return self.clock() >= self._next_sweep

    def sweep(self, *, epoch: int) -> None:
        queue_lag = self.store.oldest_due_age()  # one index probe per user: every sweep
        metrics.OLDEST_DUE_AGE.labels(str(self.store.shard_id)).set(queue_lag)
        result = self.store.sweep(epoch=epoch)
        failed = self.store.fail_abandoned(
            epoch=epoch, dead_letter=self._dead_letter, dead_letter_timeout=self.publish_timeout
        )
        if self.clock() >= self._next_maintenance:
            self._maintain()
            self._next_maintenance = self.clock() + MAINTENANCE_INTERVAL
        self._next_sweep = self.clock() + self.sweep_interval
        metrics.JOBS_SWEPT.labels("unclaimed").inc(result.unclaimed)
        metrics.JOBS_SWEPT.labels("abandoned").inc(result.abandoned)
        metrics.JOBS_SWEPT.labels("exhausted").inc(failed)
        if failed:
            logger.error(
                "shard %s: %d jobs failed: their executors died on the last attempt",
                self.store.shard_id,
                failed,
                extra={"shard": self.store.shard_id, "action": "fail"},
            )
        if result.unclaimed or result.abandoned:
            logger.warning(
                "shard %s: made %d unclaimed and %d abandoned jobs due again",
                self.store.shard_id,
                result.unclaimed,
                result.abandoned,
                extra={"shard": self.store.shard_id, "action": "sweep"},
            )

    def _maintain(self) -> None:
        """Steps 3-5: the backlog gauge, prepared transactions, purges."""
        metrics.DUE_BACKLOG.labels(str(self.store.shard_id)).set(self.store.due_backlog())
        resolved = spread.resolve_prepared(
            self.store.alias, self.store.shard_id, grace=spread.SWEEP_GRACE
        )
        now = timezone.now()
        purged_keys = self.store.purge_expired_idempotency_keys(
            expired_at=now - settings.IDEMPOTENCY_KEY_TTL, limit=PURGED_PER_SWEEP
        )
        self.store.purge_bulk_decisions(
            decided_before=now - spread.DECISION_RETENTION, limit=PURGED_PER_SWEEP
        )
        purged_jobs = 0
        if settings.JOB_RETENTION:
            purged_jobs = self.store.purge_finished_jobs(
                finished_before=now - settings.JOB_RETENTION, limit=PURGED_PER_SWEEP
            )
        metrics.IDEMPOTENCY_KEYS_PURGED.inc(purged_keys)
        metrics.JOBS_PURGED.inc(purged_jobs)
        metrics.BULK_TRANSACTIONS_RESOLVED.inc(resolved)

    def forget(self) -> None:
        """Drop the shard's gauges (its next owner reports them): a stale value of a
        previous owner would keep an alert firing for a shard that recovered."""
        shard_label = str(self.store.shard_id)
        for gauge in (metrics.DUE_BACKLOG, metrics.OLDEST_DUE_AGE):
            with contextlib.suppress(KeyError):  # never set: no sweep ran
                gauge.remove(shard_label)

    def _dead_letter(self, jobs: list[AbandonedJob]) -> bool:
        """Publish the jobs' dead letters; True once the broker acknowledged them all."""
        now = timezone.now()
        letters = [
            DeadLetter.final(
                job,
                shard_id=self.store.shard_id,
                attempt=job.attempts,
                error=LOST_ATTEMPT_ERROR,
                failed_at=now,
            )
            for job in jobs
        ]
        return dead_letters_publish(
            producer=self.producer,
            topic=self.dead_letter_topic,
            letters=letters,
            timeout=self.publish_timeout,
        )
