"""The executor worker: a member of the executors' consumer group that runs jobs.

One loop thread and a pool of handler threads. A job's progress is a named state
(``executor_worker.jobs``), and each part of the executor owns the jobs in its states:

    intake (read, decode, hold until due) -> start order (weighted fair order by user)
      -> claimer (claim per shard; inline handlers run in the claim) -> handler pool
      -> recorder (outcomes, dead letters) -> acknowledged

Each turn of the loop: read what the broker has (``Intake.read``), take jobs in weighted
fair order (``StartOrder.take``: inline jobs a claim batch at a time, thread jobs as
threads are idle), claim them (``Claimer.claim``), start the claimed ones on the threads,
record finished attempts (``Recorder.record``) and acknowledge what is done. Memory stays
bounded whatever the broker and the databases do: reading pauses while ``read_ahead`` jobs
are held, and the consumer pauses a partition where too many messages wait behind one
not handled yet (``executor_worker.consumer``).

Faults: a shard that cannot be reached has its jobs set aside while the others go on, and
a thread of its own asks it again (``executor_worker.shard_prober``); if it keeps failing
here while others reach it, this executor leaves the group (``executor_worker.step_back``).
Attempts running here hold leases renewed every ``lease_seconds / 3``, so if this executor
dies or is cut off, the schedulers' sweeper takes them back within about ``lease_seconds``.

Shutdown order (``stop()`` only sets an event): stop reading; let running attempts finish
within ``drain_timeout``, recording their outcomes; commit offsets and leave the group
(partitions move to the other executors, which read the jobs held here again); flush the
producer; close database connections. An attempt still running after the drain is left
to the sweeper.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import Error as DatabaseError
from django.db import connections

from executor_worker import metrics
from executor_worker.claimer import Claimed, Claimer
from executor_worker.claims import ClaimStore
from executor_worker.consumer import JobConsumer
from executor_worker.handler_pool import HandlerPool
from executor_worker.intake import Intake
from executor_worker.jobs import HeldJob
from executor_worker.recorder import Recorder, observe_finished
from executor_worker.runner import AttemptRunner
from executor_worker.shard_backoff import ShardBackoff
from executor_worker.shard_clocks import ShardClocks
from executor_worker.shard_prober import ShardProber
from executor_worker.start_order import StartOrder
from executor_worker.step_back import Peers, StepBack
from jobsvc.messaging.renewing_producer import RenewingProducer
from jobsvc.sharding.shards import shard_ids

logger = logging.getLogger(__name__)

_POLL_TIMEOUT = 0.05  # seconds a poll waits for messages while nothing can be claimed
# Seconds a poll waits while jobs wait for a busy handler thread: a thread that comes free
# is given its next job about this soon (a finished handler cannot wake the poll).
_THREAD_WAIT = 0.005
_DUE_WAIT_MIN = 0.001  # a poll waiting for a held job's due time waits at least this
_NOT_DUE_RETRY = 0.01  # seconds before a job the database found not due is tried again
_OBSERVE_INTERVAL = 5.0  # seconds between refreshes of the gauges
_CLOCK_INTERVAL = 2.0  # seconds between measurements (probes) of each shard's clock
# Backoff of a shard whose claim or record failed, and of the dead-letter topic: seconds
# after the first failure, doubling up to the cap (a restarting PostgreSQL takes seconds).
_RETRY_FIRST_DELAY = 0.2
_RETRY_MAX_DELAY = 5.0


@dataclass(frozen=True)
class ExecutorConfig:
    topic: str
    dead_letter_topic: str
    group_id: str
    batch_size: int  # messages per poll
    concurrency: int  # handler threads
    max_in_flight: int  # attempts claimed and not yet recorded
    max_uncommitted: int  # messages per partition held behind an unhandled one
    lease_seconds: float  # a running attempt's lease, renewed while it runs
    drain_timeout: float  # seconds running attempts get to finish at shutdown
    publish_timeout: float  # seconds to wait for the dead-letter topic's acknowledgement
    unhealthy_after: float = 10.0  # seconds a shard or the DLQ may fail before /readyz does
    # Seconds the server lets our transactions sit idle (0: no limit); publishing dead
    # letters inside one extends it.
    idle_transaction_limit: float = 0.0
    read_ahead: int = 20000  # jobs held (not due yet, or waiting for their turn) at most
    claim_batch: int = 250  # inline jobs taken per turn, to be claimed
    max_clock_offset: float = 1.0  # seconds off a shard's clock before /readyz says so
    step_back_after: float = 3.0  # seconds a shard fails here before leaving (0: never)
    step_back_seconds: float = 30.0  # seconds out of the group after leaving, at most


class ExecutorWorker:
    def __init__(
        self,
        *,
        worker_id: str,
        bootstrap: str,
        config: ExecutorConfig,
        runner: AttemptRunner,
        producer: RenewingProducer,
        on_partitions_changed: Callable[[frozenset[int]], None] | None = None,
        peers: Peers | None = None,
    ) -> None:
        """``on_partitions_changed``: see ``JobConsumer``. ``peers``: this executor's
        ZooKeeper registration (None: it never steps back)."""
        self.worker_id = worker_id
        self.bootstrap = bootstrap
        self.config = config
        self.runner = runner
        self.producer = producer
        self._on_partitions_changed = on_partitions_changed
        self._stopping = threading.Event()
        self._stores: dict[int, ClaimStore] = {}
        self.shards = ShardBackoff(first_delay=_RETRY_FIRST_DELAY, max_delay=_RETRY_MAX_DELAY)
        self.step_back = StepBack(
            peers=peers,
            shards=self.shards,
            after=config.step_back_after,
            seconds=config.step_back_seconds,
        )
        self.clocks = ShardClocks(
            read_database_clock=self._read_database_clock,
            interval=_CLOCK_INTERVAL,
            max_offset=config.max_clock_offset,
        )
        self.prober = ShardProber(clocks=self.clocks, shards=self.shards, shard_ids=shard_ids)
        self.start_order: StartOrder[HeldJob] = StartOrder()
        self.claimer = Claimer(stores=self._store, runner=runner, backoff=self.shards)
        self.recorder = Recorder(
            stores=self._store,
            shards=self.shards,
            dead_letters=ShardBackoff(first_delay=_RETRY_FIRST_DELAY, max_delay=_RETRY_MAX_DELAY),
            producer=producer,
            dead_letter_topic=config.dead_letter_topic,
            publish_timeout=config.publish_timeout,
            idle_transaction_limit=config.idle_transaction_limit,
            on_shard_failed=self.claimer.shard_failed,
        )
        self.pool: HandlerPool | None = None
        self.intake: Intake | None = None
        self._next_observation = 0.0
        self._next_renewal = 0.0

    def stop(self) -> None:
        """Ask the worker to shut down; safe from a signal handler, idempotent."""
        self._stopping.set()

    def readiness(self) -> list[str]:
        """What keeps this executor from its work; empty while it works (``/readyz``).
        Read from another thread; a stale answer by one turn is fine."""
        limit = self.config.unhealthy_after
        problems = [
            f"shard {shard}: claims or records failed for {seconds:.0f} s"
            for shard, seconds in sorted(self.shards.failing_for().items())
            if seconds > limit
        ]
        problems += [
            f"dead-letter topic {topic}: not acknowledged for {seconds:.0f} s"
            for topic, seconds in self.recorder.dead_letters.failing_for().items()
            if seconds > limit
        ]
        if self.step_back.out:
            problems.append("out of the consumer group: a shard cannot be reached from here")
        return problems + self.clocks.problems()

    def run(self) -> None:
        self.intake = self._join()
        self.pool = HandlerPool(concurrency=self.config.concurrency, runner=self.runner)
        self.prober.probe_due()  # the clocks, before the first job is held by them
        self.prober.start()
        logger.info("executor %s started", self.worker_id)
        try:
            while not self._stopping.is_set():
                if not self.step_back.out:
                    self._turn()
                else:
                    self._out_of_the_group()
            self._drain()
        finally:
            self.prober.stop()
            self.pool.shutdown()
            if not self.step_back.out:
                self.intake.consumer.close()
            self.producer.close()
            connections.close_all()
            logger.info("executor %s stopped", self.worker_id)

    def _join(self) -> Intake:
        """An intake reading this executor's partitions of the group (joining it)."""
        return Intake(
            consumer=JobConsumer(
                bootstrap=self.bootstrap,
                group_id=self.config.group_id,
                topic=self.config.topic,
                client_id=f"executor-{self.worker_id}",
                max_uncommitted=self.config.max_uncommitted,
                on_partitions_changed=self._on_partitions_changed,
            ),
            batch_size=self.config.batch_size,
            inline_handlers=self.runner.inline_handlers(),
            due_time=lambda message: self.clocks.due_time(
                message.shard_id, message.due_at.timestamp()
            ),
        )

    def _turn(self) -> None:
        now = time.time()
        self._observe()
        if self._stepped_back():
            return
        self.start_order.restore(self.shards.answering)
        held = len(self.start_order) + len(self.intake)
        self.start_order.put(
            self.intake.read(room=self.config.read_ahead - held, timeout=self._poll_timeout(now))
        )
        taken = self.start_order.take(inline=self._claim_room(), threaded=self.pool.idle())
        if taken:
            self._apply(self.claimer.claim(taken, threads=self.pool.idle()))
        self._finish()

    def _finish(self) -> None:
        self.recorder.add(self.pool.collect())
        self.intake.acknowledge(self.recorder.record())
        now = time.monotonic()
        if now >= self._next_renewal:
            self._next_renewal = now + self.config.lease_seconds / 3
            self.claimer.renew(self.pool.running())

    def _apply(self, claimed: Claimed) -> None:
        """Each claimed job to the part that owns its next state."""
        for job, attempt in claimed.started:
            self.pool.start(job, attempt)
        self.recorder.add(claimed.to_record)
        for _, outcome in claimed.succeeded:
            observe_finished(outcome)
        if claimed.dropped:  # duplicate, stale or cancelled
            metrics.JOBS_PROCESSED.labels("dropped").inc(len(claimed.dropped))
        self.intake.acknowledge([job for job, _ in claimed.succeeded] + claimed.dropped)
        not_before = time.time() + _NOT_DUE_RETRY
        self.intake.hold([job for job, _ in claimed.not_due], not_before=not_before)
        self.start_order.put(claimed.requeued)
        for shard_id, jobs in claimed.unreachable.items():
            self.start_order.set_aside_shard(shard_id, jobs)

    def _claim_room(self) -> int:
        """Inline jobs this turn may take: a claim batch, within ``max_in_flight``."""
        held = len(self.pool) + len(self.recorder)
        return min(self.config.claim_batch, self.config.max_in_flight - held)

    def _poll_timeout(self, now: float) -> float:
        """How long the first poll may wait: not at all while jobs can be claimed now;
        briefly while jobs wait for a busy thread; else until the next held job is due."""
        inline, threaded = self.start_order.waiting()
        if (inline and self._claim_room() > 0) or (threaded and self.pool.idle()):
            return 0.0
        timeout = _THREAD_WAIT if threaded else _POLL_TIMEOUT
        next_due = self.intake.next_due()
        if next_due is not None:
            timeout = min(timeout, max(_DUE_WAIT_MIN, next_due - now))
        return timeout

    def _stepped_back(self) -> bool:
        if not self.step_back.should_leave():
            return False
        self.start_order.clear()  # their messages go to the others with the partitions
        self.intake.drop_held()
        self.intake.consumer.close()
        return True

    def _out_of_the_group(self) -> None:
        """Out of the group: finish and record what runs (the prober goes on asking the
        shards); join again when ``StepBack`` says so."""
        self._finish()
        if self.step_back.should_rejoin():
            self.intake = self._join()
            return
        time.sleep(_POLL_TIMEOUT)

    def _drain(self) -> None:
        """Finish what runs and record it; jobs not started go back to the group."""
        deadline = time.monotonic() + self.config.drain_timeout
        if not self.step_back.out:
            self.intake.consumer.pause_all(True)
        self.start_order.clear()
        self.intake.drop_held()
        while (len(self.pool) or len(self.recorder)) and time.monotonic() < deadline:
            self._finish()
            time.sleep(_POLL_TIMEOUT)  # handlers finish on their threads meanwhile
        if len(self.pool):
            logger.warning(
                "%d attempts still running at shutdown; their leases will expire", len(self.pool)
            )

    def _observe(self) -> None:
        now = time.monotonic()
        if now < self._next_observation:
            return
        self._next_observation = now + _OBSERVE_INTERVAL
        metrics.IN_FLIGHT.set(len(self.pool))
        metrics.READ_AHEAD.set(len(self.start_order) + len(self.intake))
        for partition, lag in self.intake.consumer.lag().items():
            metrics.CONSUMER_LAG.labels(str(partition)).set(lag)
        failing = self.shards.failing_for()
        for shard in self._stores.keys() | failing.keys():
            metrics.SHARD_FAILING.labels(str(shard)).set(failing.get(shard, 0.0))
            metrics.CLOCK_OFFSET.labels(str(shard)).set(self.clocks.offset(shard))

    def _read_database_clock(self, shard_id: int) -> float:
        """The shard database's clock, read on the prober's thread: also a probe of the
        shard that closes or opens it (``ShardBackoff``) whether or not jobs are claimed
        there."""
        started = self.shards.now()
        try:
            now = self._store(shard_id).database_clock()
        except DatabaseError as exc:
            self.claimer.shard_failed(shard_id, "clock", exc, started_at=started)
            raise
        self.shards.succeeded(shard_id)
        return now

    def _store(self, shard_id: int) -> ClaimStore:
        store = self._stores.get(shard_id)
        if store is None:
            store = ClaimStore(shard_id=shard_id, lease_seconds=self.config.lease_seconds)
            self._stores[shard_id] = store
        return store
