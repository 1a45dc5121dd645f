"""Recording outcomes: per shard, successes and retries in one transaction, final failures
in another that publishes their dead letters before it commits. Only then are the jobs
done (their messages acknowledged).

A shard whose transaction fails keeps its outcomes (``ShardBackoff``); a dead-letter topic
that does not acknowledge holds back the final failures only, with a backoff of its own,
while successes and retries are still recorded. Nothing is acknowledged before it is
durable.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable

from django.db import Error as DatabaseError
from django.db import transaction
from django.utils import timezone

from executor_worker import metrics
from executor_worker.claims import ClaimStore, Outcome
from executor_worker.jobs import HeldJob, JobState
from executor_worker.shard_backoff import ShardBackoff
from jobsvc.messaging.dead_letter import DeadLetter, Publisher, dead_letters_publish

logger = logging.getLogger(__name__)

_Result = tuple[HeldJob, Outcome]


class _DeadLettersUnacknowledged(Exception):
    """The broker did not acknowledge every dead letter: the FAIL must not commit."""


class Recorder:
    def __init__(
        self,
        *,
        stores: Callable[[int], ClaimStore],
        shards: ShardBackoff,
        dead_letters: ShardBackoff,
        producer: Publisher,
        dead_letter_topic: str,
        publish_timeout: float,
        idle_transaction_limit: float,
        on_shard_failed: Callable[..., None],
    ) -> None:
        """``idle_transaction_limit``: the server's idle-in-transaction limit (0: none),
        extended while the dead letters go out. ``on_shard_failed``: the claimer's
        ``shard_failed`` (one backoff per shard for claims and records)."""
        self._stores = stores
        self._shards = shards
        self.dead_letters = dead_letters
        self._producer = producer
        self.topic = dead_letter_topic
        self._publish_timeout = publish_timeout
        self._idle_limit = idle_transaction_limit
        self._on_shard_failed = on_shard_failed
        self._pending: dict[int, list[_Result]] = defaultdict(list)

    def __len__(self) -> int:
        return sum(len(results) for results in self._pending.values())

    def add(self, results: Iterable[_Result]) -> None:
        for job, outcome in results:
            job.state = JobState.RECORDING
            self._pending[job.shard_id].append((job, outcome))

    def record(self) -> list[HeldJob]:
        """Write what the open shards can take; the jobs now done."""
        done: list[HeldJob] = []
        for shard_id in list(self._pending):
            if not self._shards.answering(shard_id):
                continue
            results = self._pending.pop(shard_id)
            started = self._shards.now()
            finals = [r for r in results if _is_final(r[1])]
            others = [r for r in results if not _is_final(r[1])]
            try:
                if others:
                    self._stores(shard_id).record([outcome for _, outcome in others])
                    done += [job for job, _ in others]
                    for _, outcome in others:
                        observe_finished(outcome)
                    others = []
                if finals and self.dead_letters.is_open(self.topic):
                    done += self._fail(shard_id, finals)
                    finals = [r for r in finals if r[0].state is not JobState.DONE]
            except DatabaseError as exc:
                self._on_shard_failed(shard_id, "record", exc, started_at=started)
            else:
                self._shards.succeeded(shard_id)
            if others or finals:
                self._pending[shard_id].extend(others + finals)
        return done

    def _fail(self, shard_id: int, finals: list[_Result]) -> list[HeldJob]:
        """Fail attempts for good and dead-letter them, in one transaction: FAIL (rows
        locked) names the attempts it changed, their letters are published, and only an
        acknowledged publish lets it commit. So a letter is sent only for a job this
        executor failed, and nothing is failed without its letter. A crash (or a lost
        commit) after the acknowledgement leaves the attempt running: the sweeper fails and
        dead-letters it again, keyed by the same job id (see jobsvc.messaging.dead_letter).
        Returns the jobs done; none while the topic does not acknowledge."""
        store = self._stores(shard_id)
        try:
            with transaction.atomic(using=store.alias):
                if self._idle_limit:  # idle while the letters go out
                    store.allow_idle(self._idle_limit + self._publish_timeout)
                changed = store.fail([outcome for _, outcome in finals])
                letters = _dead_letters(shard_id, finals, changed)
                if not dead_letters_publish(
                    producer=self._producer,
                    topic=self.topic,
                    letters=letters,
                    timeout=self._publish_timeout,
                ):
                    raise _DeadLettersUnacknowledged
        except _DeadLettersUnacknowledged:
            delay = self.dead_letters.failed(self.topic)
            logger.warning(
                "%d dead letters not acknowledged by %s; their jobs stay running, trying "
                "again in %.1f s",
                len(letters),
                self.topic,
                delay,
                extra={"shard": shard_id, "action": "dead_letter"},
            )
            return []
        self.dead_letters.succeeded(self.topic)
        for job, outcome in finals:
            job.state = JobState.DONE
            if job.key in changed:
                observe_finished(outcome)
            else:
                logger.info(
                    "job %s: attempt %d was no longer running; not dead-lettered",
                    outcome.attempt.job_id,
                    outcome.attempt.attempt,
                    extra={"job_id": outcome.attempt.job_id, "action": "fail"},
                )
                metrics.JOBS_PROCESSED.labels("dropped").inc()
        return [job for job, _ in finals]


def _dead_letters(
    shard_id: int, finals: list[_Result], changed: set[tuple[str, int]]
) -> list[DeadLetter]:
    """The dead letters of the final failures whose attempts ``changed`` (were failed now)."""
    now = timezone.now()
    return [
        DeadLetter.final(
            outcome.attempt,
            shard_id=shard_id,
            attempt=outcome.attempt.attempt,
            error=outcome.error,
            failed_at=now,
        )
        for _, outcome in finals
        if (outcome.attempt.job_id, outcome.attempt.attempt) in changed
    ]


def _is_final(outcome: Outcome) -> bool:
    return not outcome.succeeded and outcome.retry_delay is None


def observe_finished(outcome: Outcome) -> None:
    """Count a recorded outcome; a final one also gives the job's latency."""
    if not outcome.started:
        metrics.JOBS_PROCESSED.labels("not_started").inc()
        return
    if outcome.succeeded:
        metrics.JOBS_PROCESSED.labels("succeeded").inc()
    elif outcome.retry_delay is not None:
        metrics.JOBS_PROCESSED.labels("retried").inc()
        return
    else:
        metrics.JOBS_PROCESSED.labels("failed").inc()
    latency = (timezone.now() - outcome.attempt.execute_at).total_seconds()
    metrics.JOB_LATENCY.observe(max(0.0, latency))
