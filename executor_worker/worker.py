"""The executor worker: a member of the executors' consumer group that runs jobs.

One loop thread and a pool of handler threads. Each turn of the loop:

1. poll up to ``batch_size`` messages; consumption pauses while ``max_in_flight``
   attempts are running, so memory stays bounded however far the group lags;
2. decode them; a malformed message is logged and acknowledged, never retried forever;
3. claim the attempts, one transaction per shard; a message whose attempt cannot be
   claimed (duplicate, stale, cancelled job) is acknowledged and dropped. Inline handlers
   (they never block) run inside that transaction: their attempts are started and marked
   succeeded in one write, committed after the handler returned (see ``_claim``);
4. run the other handlers in the pool;
5. collect finished attempts and those past their deadline; publish final failures to the
   dead-letter topic (acknowledged by the broker first), record every outcome, one
   transaction per shard, and only then acknowledge their messages.

Shutdown order (``stop()`` only sets an event): stop polling; let running attempts finish
within ``drain_timeout``; record their outcomes; commit offsets and leave the group
(partitions move to the other executors); flush the producer; close database connections.
An attempt still running after the drain is left to the sweeper: its lease expires and
the job is dispatched again.
"""

from __future__ import annotations

import heapq
import logging
import queue
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from django.db import Error as DatabaseError
from django.db import connections, transaction
from django.utils import timezone

from executor_worker import metrics
from executor_worker.claims import Attempt, ClaimStore, Outcome
from executor_worker.consumer import JobConsumer, Received
from executor_worker.runner import AttemptRunner
from jobsvc.handlers.errors import HandlerTimeout
from jobsvc.messaging.dead_letter import DeadLetter, dead_letters_publish
from jobsvc.messaging.job_message import JobMessage, MalformedJobMessage
from jobsvc.messaging.producer import BatchProducer
from jobsvc.sharding.shards import UnknownShard, shard_alias

logger = logging.getLogger(__name__)

_POLL_TIMEOUT = 0.05  # seconds one poll waits for messages
_OBSERVE_INTERVAL = 5.0  # seconds between refreshes of the lag and in-flight gauges
_ERROR_BACKOFF = 0.5  # seconds after a database or broker error
_DEADLINES_SLACK = 1000  # finished attempts the deadline heap may hold beyond 2x running


@dataclass(frozen=True)
class ExecutorConfig:
    topic: str
    dead_letter_topic: str
    group_id: str
    batch_size: int  # messages per poll
    concurrency: int  # handler threads
    max_in_flight: int  # attempts running at once
    lease_grace_seconds: float  # added to a job's timeout for its running lease
    drain_timeout: float  # seconds running attempts get to finish at shutdown
    publish_timeout: float  # seconds to wait for the dead-letter topic's acknowledgement


@dataclass(order=True)
class _Running:
    deadline: float
    key: tuple[str, int] = field(compare=False)
    attempt: Attempt = field(compare=False)
    received: Received = field(compare=False)


class ExecutorWorker:
    def __init__(
        self,
        *,
        worker_id: str,
        bootstrap: str,
        config: ExecutorConfig,
        runner: AttemptRunner,
        producer: BatchProducer,
    ) -> None:
        self.worker_id = worker_id
        self.bootstrap = bootstrap
        self.config = config
        self.runner = runner
        self.producer = producer
        self._stopping = threading.Event()
        self._running: dict[tuple[str, int], _Running] = {}
        self._deadlines: list[_Running] = []  # heap by deadline
        self._finished: queue.SimpleQueue[Outcome] = queue.SimpleQueue()
        self._to_claim: list[tuple[JobMessage, Received]] = []
        self._to_record: list[tuple[Outcome, Received]] = []
        self._stores: dict[int, ClaimStore] = {}
        self.consumer: JobConsumer | None = None
        self._inline_handlers = runner.inline_handlers()
        self._next_observation = 0.0

    def stop(self) -> None:
        """Ask the worker to shut down; safe from a signal handler, idempotent."""
        self._stopping.set()

    def run(self) -> None:
        self.consumer = JobConsumer(
            bootstrap=self.bootstrap,
            group_id=self.config.group_id,
            topic=self.config.topic,
            client_id=f"executor-{self.worker_id}",
        )
        pool = ThreadPoolExecutor(self.config.concurrency, thread_name_prefix="handler")
        logger.info("executor %s started", self.worker_id)
        try:
            while not self._stopping.is_set():
                self._turn(pool, accept_new=True)
            self._drain(pool)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            self.consumer.close()
            self.producer.close()
            connections.close_all()
            logger.info("executor %s stopped", self.worker_id)

    def _drain(self, pool: ThreadPoolExecutor) -> None:
        deadline = time.monotonic() + self.config.drain_timeout
        self.consumer.pause()
        while (self._running or self._to_record) and time.monotonic() < deadline:
            self._turn(pool, accept_new=False)
        if self._running:
            logger.warning(
                "%d attempts still running at shutdown; their leases will expire",
                len(self._running),
            )

    def _observe(self) -> None:
        """Refresh the gauges (in flight, consumer lag) every few seconds."""
        now = time.monotonic()
        if now < self._next_observation:
            return
        self._next_observation = now + _OBSERVE_INTERVAL
        metrics.IN_FLIGHT.set(len(self._running))
        for partition, lag in self.consumer.lag().items():
            metrics.CONSUMER_LAG.labels(str(partition)).set(lag)

    def _turn(self, pool: ThreadPoolExecutor, *, accept_new: bool) -> None:
        self._observe()
        try:
            if accept_new:
                self._receive()
            if self._to_claim:
                self._claim_and_start(pool)
            self._collect()
            if self._to_record:
                self._record()
        except DatabaseError as exc:
            logger.warning("database error, retrying: %s", exc)
            connections.close_all()
            self._stopping.wait(_ERROR_BACKOFF)
        if not accept_new:
            time.sleep(_POLL_TIMEOUT)  # draining: pace the loop while handlers finish

    def _receive(self) -> None:
        room = self.config.max_in_flight - len(self._running) - len(self._to_claim)
        if room <= 0:
            self.consumer.pause()
        else:
            self.consumer.resume()
        batch = self.consumer.poll_batch(
            max_messages=max(1, min(room, self.config.batch_size)), timeout=_POLL_TIMEOUT
        )
        for received in batch:
            try:
                message = JobMessage.decode(received.value)
                shard_alias(message.shard_id)
            except (MalformedJobMessage, UnknownShard) as exc:
                logger.warning(
                    "dropping a malformed message at %s/%s: %s",
                    received.partition,
                    received.offset,
                    exc,
                )
                self.consumer.handled(received)
                continue
            self._to_claim.append((message, received))

    def _claim_and_start(self, pool: ThreadPoolExecutor) -> None:
        by_shard: dict[int, list[tuple[JobMessage, Received]]] = defaultdict(list)
        for message, received in self._to_claim:
            by_shard[message.shard_id].append((message, received))
        self._to_claim = []
        for shard_id, items in by_shard.items():
            ran, claimed, held = self._claim(shard_id, items)
            self._to_claim.extend(held)
            held_messages = {id(received) for _, received in held}
            started = {(a.job_id, a.attempt): a for a in claimed}
            done: list[Received] = []
            for message, received in items:
                key = (message.job_id, message.attempt)
                outcome, attempt = ran.pop(key, None), started.pop(key, None)
                if outcome is not None and outcome.succeeded:
                    done.append(received)  # committed with the claim
                    _observe_finished(outcome)
                elif outcome is not None:
                    self._to_record.append((outcome, received))
                elif attempt is not None:
                    self._start(pool, attempt, received)
                elif id(received) not in held_messages:  # duplicate, stale or cancelled
                    done.append(received)
                    metrics.JOBS_PROCESSED.labels("dropped").inc()
            self.consumer.handled(*done)

    def _pool_room(self) -> int:
        """Attempts that may be claimed for the handler threads now.

        An attempt's timeout and lease run from its claim, so claiming more than the threads
        can start soon would let attempts time out waiting in the pool's queue: keep at
        most one waiting attempt per thread.
        """
        return max(0, 2 * self.config.concurrency - len(self._running))

    def _claim(
        self, shard_id: int, items: list[tuple[JobMessage, Received]]
    ) -> tuple[dict[tuple[str, int], Outcome], list[Attempt], list[tuple[JobMessage, Received]]]:
        """Claim one shard's attempts in one transaction; run the inline ones inside it.

        An inline handler's attempt is started and marked succeeded in one write, and the
        handler runs before the commit: a job that never blocks costs one update, not
        two. One that failed is made running again and returned for ``_record``. The other
        attempts are claimed only as far as the handler threads have room (``_pool_room``);
        the rest are held for a later turn. Returns the inline attempts' outcomes, the
        other attempts (started) and the held messages.
        """
        store = self._store(shard_id)
        requests = [(m.job_id, m.attempt) for m, _ in items]
        with transaction.atomic(using=store.alias):
            now = time.monotonic()
            ran = {
                (a.job_id, a.attempt): self.runner.run(a, started=now)
                for a in store.claim_succeeded(requests, handlers=self._inline_handlers)
            }
            failed = [outcome.attempt for outcome in ran.values() if not outcome.succeeded]
            if failed:
                store.reopen(failed)
            rest = [item for item in items if (item[0].job_id, item[0].attempt) not in ran]
            room = self._pool_room()
            claimed = store.claim([(m.job_id, m.attempt) for m, _ in rest[:room]])
        started_at = timezone.now()
        for attempt in [*(outcome.attempt for outcome in ran.values()), *claimed]:
            delay = (started_at - attempt.due_at).total_seconds()
            metrics.JOB_START_DELAY.observe(max(0.0, delay))
        return ran, claimed, rest[room:]

    def _start(self, pool: ThreadPoolExecutor, attempt: Attempt, received: Received) -> None:
        now = time.monotonic()
        running = _Running(
            now + attempt.timeout_seconds, (attempt.job_id, attempt.attempt), attempt, received
        )
        self._running[running.key] = running
        heapq.heappush(self._deadlines, running)
        if self.runner.runs_inline(attempt):
            self._finished.put(self.runner.run(attempt, started=now))
        else:
            pool.submit(self._run_in_pool, attempt, now)

    def _run_in_pool(self, attempt: Attempt, started: float) -> None:
        self._finished.put(self.runner.run(attempt, started=started))

    def _collect(self) -> None:
        while True:
            try:
                outcome = self._finished.get_nowait()
            except queue.Empty:
                break
            key = (outcome.attempt.job_id, outcome.attempt.attempt)
            running = self._running.pop(key, None)
            if running is not None:  # None: it timed out already, and that was recorded
                self._to_record.append((outcome, running.received))
        now = time.monotonic()
        while self._deadlines and self._deadlines[0].deadline <= now:
            expired = heapq.heappop(self._deadlines)
            if self._running.pop(expired.key, None) is not None:
                timeout = HandlerTimeout("attempt timed out")
                outcome = self.runner.failed(expired.attempt, timeout)
                self._to_record.append((outcome, expired.received))
        if not self._running:
            self._deadlines.clear()
        elif len(self._deadlines) > 2 * len(self._running) + _DEADLINES_SLACK:
            # A finished attempt stays in the heap until its deadline; with long timeouts
            # that is many attempts (and their messages) ago. Drop those now and then.
            self._deadlines = [r for r in self._deadlines if self._running.get(r.key) is r]
            heapq.heapify(self._deadlines)

    def _record(self) -> None:
        pending, self._to_record = self._to_record, []
        final_failures = [o for o, _ in pending if not o.succeeded and o.retry_delay is None]
        if not self._dead_letter(final_failures):
            self._to_record = pending  # try again next turn; nothing is acknowledged yet
            self._stopping.wait(_ERROR_BACKOFF)
            return
        by_shard: dict[int, list[tuple[Outcome, Received]]] = defaultdict(list)
        for item in pending:
            by_shard[item[0].attempt.shard_id].append(item)
        error: DatabaseError | None = None
        for shard_id, items in by_shard.items():
            try:
                self._store(shard_id).record([outcome for outcome, _ in items])
            except DatabaseError as exc:
                # Kept for the next turn; the other shards' outcomes are still recorded.
                self._to_record.extend(items)
                error = error or exc
                continue
            self.consumer.handled(*(received for _, received in items))
            for outcome, _ in items:
                _observe_finished(outcome)
        if error is not None:
            raise error

    def _dead_letter(self, failures: list[Outcome]) -> bool:
        return dead_letters_publish(
            producer=self.producer,
            topic=self.config.dead_letter_topic,
            letters=[_dead_letter(o) for o in failures],
            timeout=self.config.publish_timeout,
        )

    def _store(self, shard_id: int) -> ClaimStore:
        store = self._stores.get(shard_id)
        if store is None:
            store = ClaimStore(
                alias=shard_alias(shard_id), lease_grace_seconds=self.config.lease_grace_seconds
            )
            self._stores[shard_id] = store
        return store


def _observe_finished(outcome: Outcome) -> None:
    """Count a recorded outcome; a final one also gives the job's latency."""
    attempt = outcome.attempt
    now = timezone.now()
    if outcome.succeeded:
        metrics.JOBS_PROCESSED.labels("succeeded").inc()
    elif outcome.retry_delay is not None:
        metrics.JOBS_PROCESSED.labels("retried").inc()
        return
    else:
        metrics.JOBS_PROCESSED.labels("failed").inc()
    metrics.JOB_LATENCY.observe(max(0.0, (now - attempt.execute_at).total_seconds()))


def _dead_letter(outcome: Outcome) -> DeadLetter:
    attempt = outcome.attempt
    return DeadLetter(
        job_id=attempt.job_id,
        shard_id=attempt.shard_id,
        user_id=attempt.user_id,
        handler=attempt.handler,
        handler_params=attempt.handler_params,
        message=attempt.message,
        attempts=attempt.attempt,
        max_attempts=attempt.max_attempts,
        reason="exhausted" if attempt.attempt >= attempt.max_attempts else "permanent",
        attempt_errors=[
            *attempt.attempt_errors,
            {"attempt": attempt.attempt, "error": outcome.error},
        ],
        execute_at=attempt.execute_at,
        created_at=attempt.created_at,
        failed_at=timezone.now(),
    )
