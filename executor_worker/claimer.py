"""Claiming attempts: one transaction per shard, with inline handlers run inside it.

For each shard with jobs taken (in the order the fair order first reached it): one
transaction claims them. An inline handler's attempt (it never blocks) is started and
marked succeeded in one write, and the handler runs before the commit: a job that never
blocks costs one update, not two; one whose handler failed is made running again and
goes to be recorded. Jobs for the handler threads are claimed in the same transaction,
as many as threads are idle, so each starts at once. A message whose attempt cannot be
claimed is either not due yet by the database's clock (held again) or will never start
from it (a duplicate, a stale attempt, a cancelled job: done).

A shard whose transaction fails is closed for a backoff (``ShardBackoff``) and its jobs
are returned, to be set aside until it answers again; the other shards go on. The claimer
also renews the leases of attempts running on the handler threads.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import Error as DatabaseError
from django.db import connections, transaction
from django.utils import timezone

from executor_worker import metrics
from executor_worker.claims import Attempt, ClaimRequest, ClaimStore, Outcome
from executor_worker.jobs import HeldJob, JobState
from executor_worker.runner import AttemptRunner
from executor_worker.shard_backoff import ShardBackoff

logger = logging.getLogger(__name__)


@dataclass
class Claimed:
    """What one round of claims did with the jobs it was given."""

    succeeded: list[tuple[HeldJob, Outcome]] = field(default_factory=list)  # ran inline
    to_record: list[tuple[HeldJob, Outcome]] = field(default_factory=list)  # inline, failed
    started: list[tuple[HeldJob, Attempt]] = field(default_factory=list)  # for the threads
    not_due: list[tuple[HeldJob, float]] = field(default_factory=list)  # due (db clock)
    requeued: list[HeldJob] = field(default_factory=list)  # no thread was idle for them
    dropped: list[HeldJob] = field(default_factory=list)  # will never start from this
    unreachable: dict[int, list[HeldJob]] = field(default_factory=dict)  # shard: jobs


class Claimer:
    def __init__(
        self, *, stores: Callable[[int], ClaimStore], runner: AttemptRunner, backoff: ShardBackoff
    ) -> None:
        self._stores = stores
        self._runner = runner
        self.backoff = backoff
        self._inline_handlers = runner.inline_handlers()

    def claim(self, jobs: list[HeldJob], *, threads: int) -> Claimed:
        """Claim ``jobs`` (in fair order), shard by shard; at most ``threads`` of those
        that need a thread."""
        result = Claimed()
        by_shard: dict[int, list[HeldJob]] = defaultdict(list)
        for job in jobs:
            job.state = JobState.CLAIMING
            by_shard[job.shard_id].append(job)
        for shard_id, shard_jobs in by_shard.items():
            if not self.backoff.answering(shard_id):
                result.unreachable[shard_id] = shard_jobs
                continue
            started = self.backoff.now()
            try:
                threads -= self._claim_shard(shard_id, shard_jobs, threads, result)
            except DatabaseError as exc:
                self.shard_failed(shard_id, "claim", exc, started_at=started)
                result.unreachable[shard_id] = shard_jobs
            else:
                self.backoff.succeeded(shard_id)
        _observe_start_delay(
            [attempt for _, attempt in result.started]
            + [outcome.attempt for _, outcome in result.succeeded + result.to_record]
        )
        return result

    def renew(self, running: dict[int, list[tuple[str, int]]]) -> None:
        """Extend the leases of the attempts running on the threads, per shard."""
        for shard_id, keys in running.items():
            if not self.backoff.answering(shard_id):
                continue
            started = self.backoff.now()
            try:
                self._stores(shard_id).renew(keys)
            except DatabaseError as exc:
                self.shard_failed(shard_id, "renew", exc, started_at=started)

    def shard_failed(
        self, shard_id: int, action: str, exc: DatabaseError, *, started_at: float | None = None
    ) -> None:
        """Back off from the shard and drop its connection; a new one is made on next use.
        ``started_at`` (the backoff's clock): when the failed operation began."""
        delay = self.backoff.failed(shard_id, started_at=started_at)
        logger.warning(
            "shard %s: %s failed, trying again in %.1f s: %s",
            shard_id,
            action,
            delay,
            exc,
            extra={"shard": shard_id, "action": action},
        )
        with contextlib.suppress(DatabaseError):  # it was broken: closed is what we want
            connections[self._stores(shard_id).alias].close()

    def _claim_shard(
        self, shard_id: int, jobs: list[HeldJob], threads: int, result: Claimed
    ) -> int:
        """One shard's transaction; how many attempts it claimed for the threads."""
        store = self._stores(shard_id)
        inline = [job for job in jobs if job.inline]
        for_threads = [job for job in jobs if not job.inline]
        threaded, waiting = for_threads[: max(0, threads)], for_threads[max(0, threads) :]
        no_thread = {id(job) for job in waiting}
        with transaction.atomic(using=store.alias):
            started = time.monotonic()
            ran = store.claim_succeeded(_requests(inline), handlers=self._inline_handlers)
            outcomes = {(a.job_id, a.attempt): self._runner.run(a, started=started) for a in ran}
            failed = [outcome.attempt for outcome in outcomes.values() if not outcome.succeeded]
            if failed:
                store.reopen(failed)
            claimed = {(a.job_id, a.attempt): a for a in store.claim(_requests(threaded))}
            unclaimed = [j for j in jobs if j.key not in outcomes and j.key not in claimed]
            not_due = store.not_yet_due(_requests(j for j in unclaimed if id(j) not in no_thread))
        threads_claimed = len(claimed)
        for job in jobs:  # a job's second message in the batch finds its attempt taken
            outcome, attempt = outcomes.pop(job.key, None), claimed.pop(job.key, None)
            if outcome is not None:
                (result.succeeded if outcome.succeeded else result.to_record).append((job, outcome))
            elif attempt is not None:
                result.started.append((job, attempt))
            elif id(job) in no_thread:
                result.requeued.append(job)
            elif job.key in not_due:
                result.not_due.append((job, not_due[job.key]))
            else:
                result.dropped.append(job)
        return threads_claimed


def _requests(jobs) -> list[ClaimRequest]:
    messages = (job.message for job in jobs)
    return [ClaimRequest(m.job_id, m.attempt, m.user_id, m.due_at) for m in messages]


def _observe_start_delay(attempts: list[Attempt]) -> None:
    if not attempts:
        return
    started_at = timezone.now()
    for attempt in attempts:
        delay = (started_at - attempt.due_at).total_seconds()
        metrics.JOB_START_DELAY.observe(max(0.0, delay))
