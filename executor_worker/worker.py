"""The executor worker: a member of the executors' consumer group that runs jobs.

One loop thread and a pool of handler threads. Each turn of the loop:

1. read ahead: what the express runner handed over first (the express topic carries the
   first few jobs of users with few in flight: scheduler_worker.express_lane; a thread of
   its own runs their due inline jobs as they arrive: executor_worker.express_runner; see
   ``_read_express``), then poll the jobs topic (``batch_size`` a poll) until
   ``read_ahead`` are held or the client has no more (see ``_receive``), the runner's
   handover again between every two polls; consumption pauses while the read-ahead is
   full and, per partition, while ``max_uncommitted`` messages wait behind one not yet
   handled, so memory stays bounded whatever the broker and the databases do;
2. decode them; a malformed message is logged and acknowledged, never retried forever;
   one whose job is not due yet (schedulers dispatch ahead) is held until it is
   (executor_worker.not_due); the others wait in the fair buffer
   (executor_worker.fair_buffer), by user;
3. take up to ``claim_batch`` of them in weighted fair order across users, as many as
   ``max_in_flight`` (attempts claimed, running or being recorded) leaves room for, and
   claim the attempts, one transaction per shard, the first few of the fair order in
   small claims of their own ahead of the rest (see ``_claim_first``); a message whose
   attempt cannot be claimed (duplicate, stale, cancelled job) is acknowledged and
   dropped. Inline handlers (they never block) run inside that transaction: their
   attempts are started and marked succeeded in one write, committed after the handler
   returned (see ``_claim``). Other attempts are claimed only for idle handler threads,
   so each starts at once: its timeout runs from the moment its handler starts, and its
   lease from its claim;
4. run the other handlers in the pool;
5. collect finished attempts and those past their deadline, and record them, per shard:
   successes and retries in one transaction; final failures in another, which publishes
   their dead letters before it commits (see ``_fail``). Only then are their messages
   acknowledged.

Faults. A shard whose claim or record fails keeps its messages and outcomes and is tried
again after a backoff (``RetryGate``); the other shards go on. A dead-letter topic that
does not acknowledge holds the final failures only, also with a backoff; successes and
retries are still recorded. Nothing is acknowledged before it is durable, so a partition's
committed offset waits at the first message not handled yet (at-least-once allows no
less), and the executor stops reading a partition where too many wait (see above).

Shutdown order (``stop()`` only sets an event): stop polling; let running attempts finish
within ``drain_timeout``; record their outcomes; commit offsets and leave the group
(partitions move to the other executors); flush the producer; close database connections.
An attempt still running after the drain is left to the sweeper: its lease expires and
the job is dispatched again.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import math
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from django.db import Error as DatabaseError
from django.db import connections, transaction
from django.utils import timezone

from executor_worker import metrics
from executor_worker.claims import Attempt, ClaimStore, Outcome
from executor_worker.consumer import JobConsumer, Received
from executor_worker.express_runner import ExpressRunner, Ran
from executor_worker.fair_buffer import FairBuffer
from executor_worker.not_due import NotDueYet
from executor_worker.retry_gate import RetryGate
from executor_worker.runner import AttemptRunner
from executor_worker.work_stealing import WorkStealing
from jobsvc.handlers.errors import HandlerTimeout
from jobsvc.messaging.dead_letter import DeadLetter, dead_letters_publish
from jobsvc.messaging.job_message import JobMessage, MalformedJobMessage
from jobsvc.messaging.renewing_producer import RenewingProducer
from jobsvc.messaging.topic_names import express_group_of
from jobsvc.postgresql.warm_up import open_connections
from jobsvc.sharding.shards import (
    UnknownShard,
    shard_alias,
    shard_aliases,
    shard_count,
    shard_ids,
)

logger = logging.getLogger(__name__)

_POLL_TIMEOUT = 0.05  # seconds one poll waits for messages
# A poll that waits for a held message's due time waits at least this long, so a loop
# does not spin through the last fraction of a millisecond.
_DUE_WAIT_MIN = 0.001
# Seconds a poll waits while jobs wait for a busy handler thread: a thread that comes free
# is given its next job about this soon (a finished handler cannot wake the poll).
_THREAD_WAIT_TIMEOUT = 0.005
# While jobs wait for a handler thread, or the last jobs here of a user with at least
# 1/_SHORT_TURNS of the weights held are taken, turns take this many times fewer jobs (see
# ExecutorWorker._claim_batch).
_SHORT_TURNS = 4
# Polls a turn makes while the broker has full batches ready: reading several times faster
# than claiming moves a burst of dispatches (up to the schedulers' in-flight caps) out of
# the broker's FIFO queue and into the read-ahead, where the order is fair, within a second.
_POLLS_PER_TURN = 4
# While a held job is due within this many seconds, polls take an eighth of a batch (see
# ExecutorWorker._poll_size); the first eighth of a turn's claim batch, in fair order, is
# claimed apart, ahead of the rest (see ExecutorWorker._claim_first).
_SOON = 0.25
_SMALL_STEPS = 8
_HEAD_SHARDS = 2  # the head's claims: on the shards of the turn's first jobs only
# A turn is cut short for a held job that came due only after this many seconds, so that
# a steady stream of jobs coming due (each turn lets some in) does not cut every turn to
# one small claim while a backlog waits to be claimed.
_MIN_CUT_TURN = 0.05
# Work stealing (executor_worker.work_stealing): a user that runs dry here after this many
# of its jobs in a row is looked for in the shards, at most this many users a look, at
# most one look per interval (seconds).
_STEAL_AFTER_RUN = 32
_STEAL_MAX_USERS = 100
_STEAL_INTERVAL = 0.05
# Only jobs published and due at least this many seconds ago are taken: younger ones are
# on their way to an executor that keeps up (messages reach one in tens of milliseconds
# under load), and taking them would only make that one drop its copies.
_STEAL_WAITED = 0.5
# The partition of a stolen job's stand-in for a message: there is nothing to commit, and
# JobConsumer.handled ignores a partition it was not assigned, as it does a revoked one.
_STOLEN = -1
# Seconds a poll of the jobs topic may wait while an express topic is read too: what its
# runner hands over (express jobs that need a handler thread) is taken between those polls,
# so this is what such a job may wait for an idle executor to look.
_EXPRESS_WAIT = 0.01
_OBSERVE_INTERVAL = 5.0  # seconds between refreshes of the lag and in-flight gauges
_DEADLINES_SLACK = 1000  # finished attempts the deadline heap may hold beyond 2x running
# Backoff of a shard whose claim or record failed, and of the dead-letter topic: seconds
# after the first failure, doubling up to the cap (a restarting PostgreSQL takes seconds).
_RETRY_FIRST_DELAY = 0.2
_RETRY_MAX_DELAY = 5.0

_Item = tuple[JobMessage, Received]  # a message waiting to be claimed
_Result = tuple[Outcome, Received]  # an outcome waiting to be recorded


class _DeadLettersUnacknowledged(Exception):
    """The broker did not acknowledge every dead letter: the FAIL must not commit."""


@dataclass(frozen=True)
class ExecutorConfig:
    topic: str
    dead_letter_topic: str
    group_id: str
    batch_size: int  # messages per poll
    concurrency: int  # handler threads
    max_in_flight: int  # attempts held at once: waiting for a claim, running, recording
    max_uncommitted: int  # messages per partition held behind an unhandled one
    lease_grace_seconds: float  # added to a job's timeout for its running lease
    drain_timeout: float  # seconds running attempts get to finish at shutdown
    publish_timeout: float  # seconds to wait for the dead-letter topic's acknowledgement
    unhealthy_after: float = 10.0  # seconds a shard or the DLQ may fail before /readyz does
    # Seconds the server lets our transactions sit idle (JOBSVC_DB_IDLE_IN_TRANSACTION_
    # TIMEOUT_SECONDS; 0: no limit); publishing dead letters inside one extends it.
    idle_transaction_limit: float = 0.0
    read_ahead: int = 40000  # messages held before their claim, taken in fair order
    claim_batch: int = 1000  # messages taken from the read-ahead per turn, to be claimed
    # Seconds a turn reads past its first batch once its fair buffers hold what it may
    # claim. Reading 4 batches took 1.0-1.3 s on a busy 2-core machine (decoding 8,000
    # messages): both executors read at the same time once a backlog came due and claimed
    # nothing meanwhile, so whole seconds went by with no job started (a clean-clone make
    # test saw 2,000 started, then 0, then 4,000, in a 1:2:4 run's first seconds).
    read_budget: float = 0.1
    # Run the jobs of users this executor ran out of that wait for another executor
    # (executor_worker.work_stealing).
    work_stealing: bool = True
    # Read ahead of ``topic`` and between claims, in a consumer group of its own
    # (jobsvc.messaging.topic_names.express_group_of); "": none
    # (scheduler_worker.express_lane).
    express_topic: str = ""


@dataclass(order=True)
class _Running:
    deadline: float  # infinite until the handler starts: waiting is not running
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
        producer: RenewingProducer,
        on_partitions_changed: Callable[[frozenset[int]], None] | None = None,
    ) -> None:
        """``on_partitions_changed``: see ``JobConsumer``; it must not block."""
        self.worker_id = worker_id
        self.bootstrap = bootstrap
        self.config = config
        self.runner = runner
        self.producer = producer
        self._on_partitions_changed = on_partitions_changed
        self._stopping = threading.Event()
        self._running: dict[tuple[str, int], _Running] = {}
        self._deadlines: list[_Running] = []  # heap by deadline, of started attempts
        self._started: queue.SimpleQueue[tuple[tuple[str, int], float]] = queue.SimpleQueue()
        self._finished: queue.SimpleQueue[tuple[Outcome, bool]] = queue.SimpleQueue()
        self._pool_busy = 0  # attempts handed to the pool and not returned, late ones too
        # Messages read ahead, not given a claim yet: taken in weighted fair order by user.
        # Jobs of inline handlers are taken a claim batch at a time; jobs that need a
        # handler thread only as threads come free, so that the fair order, not a queue
        # per shard, decides which of them starts next.
        report_dry = config.work_stealing
        turn = config.claim_batch
        self._waiting: FairBuffer[_Item] = FairBuffer(report_dry=report_dry, turn=turn)
        self._waiting_for_thread: FairBuffer[_Item] = FairBuffer(report_dry=report_dry, turn=turn)
        # Users (with their buffer) some of whose jobs taken here had started elsewhere:
        # their next held copies are checked before the next take.
        self._contested: set[tuple[FairBuffer[_Item], Hashable]] = set()
        self._stealing = WorkStealing(
            backlog_run=_STEAL_AFTER_RUN,
            max_users=_STEAL_MAX_USERS,
            interval=_STEAL_INTERVAL,
            clock=time.monotonic,
        )
        # Messages read before their job is due (schedulers dispatch ahead), until it is.
        self._not_due: NotDueYet[_Item] = NotDueYet()
        # Per shard, in fair order: messages to claim (inline handlers first tried), the
        # first few of a turn's apart (see _claim_first), and messages whose inline claim
        # is done that wait for a free handler thread.
        self._head: dict[int, list[_Item]] = defaultdict(list)
        self._to_claim: dict[int, list[_Item]] = defaultdict(list)
        self._for_pool: dict[int, list[_Item]] = defaultdict(list)
        self._to_record: dict[int, list[_Result]] = defaultdict(list)
        self._shards = RetryGate(first_delay=_RETRY_FIRST_DELAY, max_delay=_RETRY_MAX_DELAY)
        self._dead_letters = RetryGate(first_delay=_RETRY_FIRST_DELAY, max_delay=_RETRY_MAX_DELAY)
        self._stores: dict[int, ClaimStore] = {}
        self.consumer: JobConsumer | None = None
        self.express: JobConsumer | None = None  # the express topic's, if configured
        self._express_runner: ExpressRunner | None = None  # reads and runs it
        self._express_due = False  # an express job came due since the last take
        self._skipped_reading = False  # the last turn read no messages, for express jobs
        self._inline_handlers = runner.inline_handlers()
        self._next_observation = 0.0

    def stop(self) -> None:
        """Ask the worker to shut down; safe from a signal handler, idempotent."""
        self._stopping.set()

    def readiness(self) -> list[str]:
        """What keeps this executor from its work; empty while it works (``/readyz``).

        A shard database or the dead-letter topic that has failed every try for longer
        than ``unhealthy_after`` seconds: the executor holds that shard's jobs (and its
        partitions' offsets) until it answers. Read from another thread; a stale answer
        by one turn is fine.
        """
        problems = [
            f"shard {shard}: claims or records failed for {seconds:.0f} s"
            for shard, seconds in sorted(self._shards.failing_for().items())
            if seconds > self.config.unhealthy_after
        ]
        problems += [
            f"dead-letter topic {topic}: not acknowledged for {seconds:.0f} s"
            for topic, seconds in self._dead_letters.failing_for().items()
            if seconds > self.config.unhealthy_after
        ]
        return problems

    def run(self) -> None:
        self.consumer = JobConsumer(
            bootstrap=self.bootstrap,
            group_id=self.config.group_id,
            topic=self.config.topic,
            client_id=f"executor-{self.worker_id}",
            max_uncommitted=self.config.max_uncommitted,
            on_partitions_changed=self._on_partitions_changed,
        )
        if self.config.express_topic:
            self.express = JobConsumer(
                bootstrap=self.bootstrap,
                group_id=express_group_of(self.config.group_id),
                topic=self.config.express_topic,
                client_id=f"executor-{self.worker_id}-express",
                max_uncommitted=self.config.max_uncommitted,
            )
            self._express_runner = ExpressRunner(
                consumer=self.express,
                run_inline=self._run_express,
                inline_handlers=self._inline_handlers,
                shard_is_open=self._shards.is_open,
                batch_size=self.config.batch_size,
                # This thread's connections, opened now rather than for its first job.
                on_start=lambda: open_connections(shard_aliases()),
            )
            self._express_runner.start()
        pool = ThreadPoolExecutor(self.config.concurrency, thread_name_prefix="handler")
        logger.info("executor %s started", self.worker_id)
        try:
            while not self._stopping.is_set():
                self._turn(pool, accept_new=True)
            self._drain(pool)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            self.consumer.close()
            if self.express is not None:
                self._stop_express_runner()
                self.express.close()
            self.producer.close()
            connections.close_all()
            logger.info("executor %s stopped", self.worker_id)

    def _drain(self, pool: ThreadPoolExecutor) -> None:
        """Finish what runs and record it; messages not claimed yet go back to the group."""
        deadline = time.monotonic() + self.config.drain_timeout
        self.consumer.pause_all(True)
        if self.express is not None:
            self._stop_express_runner()
            self.express.pause_all(True)
            self._read_express()  # what it handed over: outcomes to record, charges
        self._waiting.clear()
        self._waiting_for_thread.clear()
        self._not_due.clear()
        self._head.clear()
        self._to_claim.clear()
        self._for_pool.clear()
        while (self._running or self._held(self._to_record)) and time.monotonic() < deadline:
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
        failing = self._shards.failing_for()
        for shard in self._stores.keys() | failing.keys():
            metrics.SHARD_FAILING.labels(str(shard)).set(failing.get(shard, 0.0))

    def _turn(self, pool: ThreadPoolExecutor, *, accept_new: bool) -> None:
        self._observe()
        if accept_new:
            self._steal()
            self._receive()
            self._claim_and_start(pool)
        self._collect()
        self._record()
        if not accept_new:
            time.sleep(_POLL_TIMEOUT)  # draining: pace the loop while handlers finish

    def _handled(self, *received: Received) -> None:
        """These messages' outcomes are durable: let their consumers commit them (the
        express topic's through its runner, whose thread owns that consumer)."""
        runner = self._express_runner
        if runner is None:
            self.consumer.handled(*received)
            return
        express_topic = runner.consumer.topic
        self.consumer.handled(*(r for r in received if r.topic != express_topic))
        runner.acknowledge(*(r for r in received if r.topic == express_topic))

    @staticmethod
    def _held(items: dict[int, list]) -> int:
        return sum(len(shard_items) for shard_items in items.values())

    def _receive(self) -> None:
        """Read ahead up to ``read_ahead`` messages; pass on as many as may be held, fairly.

        Messages read wait in the fair buffers; each turn, as many as ``max_in_flight``
        leaves room for go on to be claimed, in weighted fair order across users (see
        executor_worker.fair_buffer), at most ``claim_batch`` of them: a job next in that
        order starts after about one claim, not behind a whole poll's worth. Jobs whose
        handler needs a thread are passed on only as far as threads are idle: a job
        passed on waits for its claim in a queue per shard, where the order is no longer
        fair. A turn reads up to ``_POLLS_PER_TURN`` batches' worth, several times what
        a claim takes, so the read-ahead fills while the broker has messages:
        the broker's FIFO queue moves into the executor, where the order is fair. Past
        its first batch it reads for ``read_budget`` seconds at most once the buffers
        hold what the turn may claim: on a busy machine 4 batches took over a second,
        in which nothing was claimed.

        A held job that came due ends the reading, but only after a whole batch: reading
        must keep up with what the schedulers publish, or the messages queue in the
        client, in FIFO order, where a job sent a second ahead of its time is still
        unread when it is due (a steady stream of jobs coming due would end every turn's
        reading after its first small poll). And only an empty poll means the client has
        nothing more: a poll returns what the client's queue hands over at once, often
        less than asked while tens of thousands wait (librdkafka's ``fetchq_cnt`` stayed at
        20,000-58,000 messages through a 100,000-job flood while turns stopped at the
        first short poll; tools/bench steady_beside_flood).
        """
        # Express jobs due now are taken before anything more is read (reading takes
        # tens of milliseconds a batch); the next turn reads, whatever the express topic
        # brings, so that reading keeps up.
        self._skipped_reading = self._read_express() and not self._skipped_reading
        to_read = 0 if self._skipped_reading else _POLLS_PER_TURN * self.config.batch_size
        read = 0
        reading_since = time.monotonic()
        while to_read > 0:
            room_to_read = self.config.read_ahead - self._read_ahead()
            self.consumer.pause_all(room_to_read <= 0)  # paused, a poll only waits
            size = self._poll_size()
            batch = self.consumer.poll_batch(
                max_messages=max(1, min(room_to_read, size)),
                timeout=0.0 if read else self._poll_timeout(),  # wait only for the first
            )
            self._hold(batch)
            to_read -= len(batch)
            read += len(batch)
            if not batch:
                break  # the client has no more for now, or the read-ahead is full
            express_due = self._read_express()  # between every two polls: it is cheap
            if read >= self.config.batch_size and (express_due or self._held_job_due()):
                break  # it goes first: reading more would keep it waiting (but see above)
            if (
                read >= self.config.batch_size
                and time.monotonic() - reading_since >= self.config.read_budget
                and self._held_to_claim() >= self._claim_room()
            ):
                break  # enough to claim: the next turn reads on (``read_budget``)
        self._release_due()
        self._drop_started_elsewhere()
        room = self._claim_room()
        taken: list[_Item] = []
        for buffer, count in (
            (self._waiting_for_thread, min(room, self._thread_room())),
            (self._waiting, room),
        ):
            items = buffer.take(max(0, count))
            room -= len(items)
            taken += items
        self._express_due = False  # taken in fair order, if there was room
        self._claim_first(taken)
        metrics.READ_AHEAD.set(self._read_ahead())

    def _steal(self) -> None:
        """Hold the jobs that wait for other executors of the users that ran dry here
        (see executor_worker.work_stealing); a shard that fails is skipped."""
        for buffer in (self._waiting, self._waiting_for_thread):
            self._stealing.ran_dry(buffer.ran_dry())
        users = self._stealing.users_to_look_for()
        if not users:
            return
        found: set[int] = set()
        stolen = 0
        # About a claim batch in all: what a turn takes.
        per_user = math.ceil(self.config.claim_batch / (shard_count() * len(users)))
        held = [
            message.job_id
            for buffer in (self._waiting, self._waiting_for_thread)
            for user in users
            for message, _ in buffer.items_of(user)
        ]
        for shard_id in shard_ids():
            if not self._shards.is_open(shard_id):
                continue
            try:
                messages = self._store(shard_id).work_to_steal(
                    users, per_user=per_user, held=held, waited=_STEAL_WAITED
                )
            except DatabaseError as exc:
                self._shard_failed(shard_id, "steal", exc)
                continue
            self._shards.succeeded(shard_id)
            for message in messages:
                self._wait(message, Received(partition=_STOLEN, offset=-1, value=None))
                found.add(message.user_id)
            metrics.JOBS_STOLEN.inc(len(messages))
            stolen += len(messages)
        self._stealing.found(users, found)
        if stolen:
            logger.info(
                "took %d jobs that waited for other executors (users: %d)",
                stolen,
                len(found),
                extra={"action": "steal"},
            )

    def _drop_started_elsewhere(self) -> None:
        """Drop the held copies of jobs that started elsewhere, of the users whose jobs
        taken here were found so: their next copies are checked (one query per shard, two
        claim batches' worth shared out among those users, at most a claim batch each),
        and checked again before every take while checks find some.

        Near a user's run-out, work stealing leaves two executors holding copies of its
        last jobs (executor_worker.work_stealing). Taken, a copy that the other started
        takes a turn, its user's, and its claim finds nothing to start: that turn is
        refunded (``FairBuffer.refund``), but only from the next take on, and near the
        run-out there are one or two takes left. So the user's share of what starts in its
        last second fell well below its weight. Dropped before the take, such copies take
        no turn: over thirteen alternated 1:2:4 pairs the weight-4 user's last second was
        3.6-15.1 % off its share (median 7.7, within 5 % in 4) against 4.7-17.6 % (median
        10.3, in 1), better in 11 (tools/bench/results/2026-11-27/24-dropped-copies.md)."""
        contested, self._contested = self._contested, set()
        by_shard: defaultdict[int, list[tuple[FairBuffer[_Item], Hashable, _Item]]]
        by_shard = defaultdict(list)
        batch = self.config.claim_batch
        per_user = min(batch, max(1, 2 * batch // max(1, len(contested))))
        for buffer, user in contested:
            for item in buffer.next_of(user, per_user):
                by_shard[item[0].shard_id].append((buffer, user, item))
        for shard_id, copies in by_shard.items():
            if not self._shards.is_open(shard_id):
                continue
            try:
                startable = self._store(shard_id).startable(
                    [(message.job_id, message.attempt) for _, _, (message, _) in copies]
                )
            except DatabaseError as exc:
                self._shard_failed(shard_id, "check", exc)
                continue
            self._shards.succeeded(shard_id)
            gone: defaultdict[tuple[FairBuffer[_Item], Hashable], list[_Item]]
            gone = defaultdict(list)
            for buffer, user, item in copies:
                if (item[0].job_id, item[0].attempt) not in startable:
                    gone[buffer, user].append(item)
            for (buffer, user), items in gone.items():
                buffer.discard(user, items)
                self._handled(*(received for _, received in items))
                metrics.JOBS_PROCESSED.labels("dropped").inc(len(items))
                self._contested.add((buffer, user))

    def _claim_first(self, taken: list[_Item]) -> None:
        """Queue the jobs just taken (in fair order) for their claims: those of the first
        ``claim_batch / _SMALL_STEPS`` on the shards of the first ``_HEAD_SHARDS`` jobs in
        claims of their own, one per shard, ahead of everything (``_head``); the rest
        behind the jobs left from earlier turns, which came earlier in the fair order. A
        job the fair order put first, a light user's, then waits for a small claim or two,
        not for claims of hundreds of jobs on other shards, nor for those a turn cut short
        left (``_claim_and_start``); and the jobs left wait at most until the shards ahead
        of them are claimed, not behind every later turn's. The head is on two shards, not
        every shard of its jobs: the fair buffer takes a user's jobs in turn from each
        shard, so the head's jobs are on every shard, and a small claim on each was three
        more claims a turn (a 1:2:4 flood drained slower in 5 of 6 alternated runs)."""
        step = max(1, self.config.claim_batch // _SMALL_STEPS)
        head_shards = {message.shard_id for message, _ in taken[:_HEAD_SHARDS]}
        for message, received in taken[:step]:
            if message.shard_id in head_shards:
                self._head[message.shard_id].append((message, received))
            else:
                self._to_claim[message.shard_id].append((message, received))
        for message, received in taken[step:]:
            self._to_claim[message.shard_id].append((message, received))

    def _poll_size(self) -> int:
        """Messages a poll may take: a batch, or an eighth of one while a held job is due
        within ``_SOON``. The loop looks for due jobs between polls, and a poll of a whole
        batch (2,000 messages decoded) takes up to a few hundred milliseconds on a busy
        machine."""
        next_due = self._not_due.next_due()
        if next_due is not None and next_due - time.time() < _SOON:
            return max(1, self.config.batch_size // _SMALL_STEPS)
        return self.config.batch_size

    def _read_express(self) -> bool:
        """Take what the express runner handed over (executor_worker.express_runner);
        whether a job of it came due since the last turn took jobs to claim.

        The runner starts the express topic's due inline jobs itself and charges them
        to their users' shares in the fair order here. What it hands over (jobs that need
        a handler thread or are not due yet, and what it could not claim) waits in the
        fair buffers like any other job: each is one of the first few jobs of a user with
        few in flight on its shard (scheduler_worker.express_lane), which the fair order
        starts first anyway (a user that had nothing held starts from the current pass).
        What they skip is the jobs topic's queue; here, a due one ends the turn after the
        claim at hand and the next turn takes jobs before it reads more (``_receive``).
        Uncharged, express jobs spread the started jobs per user of 1,000 users from
        178-199 to 149-198 (tools/bench fairness_thousand_users)."""
        if self._express_runner is None:
            return self._express_due
        handover = self._express_runner.take_handover()
        if handover.messages and self._hold(handover.messages):
            self._express_due = True
        for outcome, received in handover.to_record:
            self._to_record[outcome.attempt.shard_id].append((outcome, received))
        for user, (weight, count) in handover.started.items():
            self._waiting.charge(user, weight, count)
        return self._express_due

    def _run_express(self, shard_id: int, items: list[_Item]) -> Ran:
        """On the express runner's thread: claim and run ``items``' inline attempts in
        one transaction on that thread's connection (``_claim_in_one``)."""
        outcomes, _, _ = self._claim_in_one(shard_id, items, inline=True, room=0)
        _observe_start_delay(outcome.attempt for outcome in outcomes.values())
        ran = Ran()
        for message, received in items:
            outcome = outcomes.get((message.job_id, message.attempt))
            if outcome is None:
                ran.not_run.append(received)
            elif outcome.succeeded:
                ran.succeeded.append((outcome, received))
                _observe_finished(outcome)
            else:
                ran.failed.append((outcome, received))
        return ran

    def _stop_express_runner(self) -> None:
        if self._express_runner is not None and not self._express_runner.stop(
            self.config.drain_timeout
        ):
            logger.warning("the express runner did not stop within the drain timeout")

    def _held_job_due(self) -> bool:
        next_due = self._not_due.next_due()
        return next_due is not None and next_due <= time.time()

    def _release_due(self) -> int:
        """Let the held messages that are due now into the fair buffers; how many."""
        due = self._not_due.release(time.time())
        for message, received in due:
            self._wait(message, received)
        return len(due)

    def _held_to_claim(self) -> int:
        """Due jobs held in the fair buffers, not yet taken to be claimed."""
        return len(self._waiting) + len(self._waiting_for_thread)

    def _claim_room(self) -> int:
        """Jobs this turn may pass on to be claimed (0 or less: none)."""
        return min(self.config.max_in_flight - self._held_attempts(), self._claim_batch())

    def _claim_batch(self) -> int:
        """Jobs a turn may take: ``claim_batch``, or a part of it while jobs wait for a
        handler thread or a heavy user runs low here among others
        (``FairBuffer.running_low``).

        Threads get their next jobs once a turn, and a turn that claims a whole batch of
        inline jobs takes long enough (0.2 s at full speed) to leave them idle most of it:
        shorter turns keep webhooks going beside a flood of inline jobs.

        A heavy user's last jobs here are, with work stealing, often jobs the other
        executors hold copies of too; a copy that one started is dropped by the check
        before the other's next take (``_drop_started_elsewhere``), but two executors that
        take the same copies in one turn both charge the user for them, and only one
        starts each: for a turn's length the user gets about half its share. Shorter turns
        check more often and lose less: over eleven 1:2:4 pairs alternated with whole
        turns (tools/bench/results/2026-11-27/29-short-turns-at-run-out.md), the second
        before the weight-4 user's last start was 0.8-2.7 % off its share, against
        2.1-13.1 % with whole turns (within 5 % in 4 of 11). The same rule showed no gain
        in session 23, before that check and before each user's jobs were dealt to every
        executor in turn (tools/bench/results/2026-11-27/22-refund.md).

        Only a user with at least a quarter of the weights held counts: a user with a
        small share loses little to copies, and taken for every user running low, quarter
        turns drained a 100,000-job flood beside ten steady users (tools/bench
        steady_beside_flood) in 6.29-6.57 s against 5.42-6.14 s, slower in three pairs of
        three; with this condition no turn of a traced run of it was shortened. A user
        alone takes nobody's turns: it is drained in whole turns."""
        if len(self._waiting_for_thread) or self._waiting.running_low(min_share=1 / _SHORT_TURNS):
            return max(1, self.config.claim_batch // _SHORT_TURNS)
        return self.config.claim_batch

    def _poll_timeout(self) -> float:
        """How long a poll may wait for messages: not at all while held jobs can be
        claimed now; briefly while jobs wait for a busy handler thread to come free."""
        room = self._claim_room()
        if room > 0 and (
            len(self._waiting) or (len(self._waiting_for_thread) and self._thread_room() > 0)
        ):
            return 0.0
        timeout = _THREAD_WAIT_TIMEOUT if len(self._waiting_for_thread) else _POLL_TIMEOUT
        if self.express is not None:  # it is read only between the jobs topic's polls
            timeout = min(timeout, _EXPRESS_WAIT)
        next_due = self._not_due.next_due()
        if next_due is not None:  # wake up when the next held job is due
            timeout = min(timeout, max(_DUE_WAIT_MIN, next_due - time.time()))
        return timeout

    def _thread_room(self) -> int:
        """Jobs needing a thread that may be passed on to be claimed: the idle threads
        not promised to jobs already waiting for one."""
        return self._pool_room() - self._held(self._for_pool)

    def _read_ahead(self) -> int:
        return len(self._waiting) + len(self._waiting_for_thread) + len(self._not_due)

    def _held_attempts(self) -> int:
        """Attempts held: waiting for their claim, running, or waiting to be recorded."""
        return (
            len(self._running)
            + self._held(self._head)
            + self._held(self._to_claim)
            + self._held(self._for_pool)
            + self._held(self._to_record)
        )

    def _hold(self, batch: list[Received]) -> int:
        """Hold the messages read; how many of them are due (waiting to be claimed)."""
        due_now = 0
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
                self._handled(received)
                continue
            due = message.due_at.timestamp()
            if due > time.time():
                self._not_due.put(due, (message, received))
            else:
                self._wait(message, received)
                due_now += 1
        return due_now

    def _wait(self, message: JobMessage, received: Received) -> None:
        """Hold a due job's message in its fair buffer until it is taken to be claimed."""
        self._buffer_of(message).put(
            message.user_id,
            message.weight,
            (message, received),
            priority=message.priority,
            lane=message.shard_id,
        )

    def _buffer_of(self, message: JobMessage) -> FairBuffer[_Item]:
        """The fair buffer a job's message waits in: inline jobs, or jobs for a thread."""
        if message.handler in self._inline_handlers:
            return self._waiting
        return self._waiting_for_thread

    def _claim_and_start(self, pool: ThreadPoolExecutor) -> None:
        """Claim what waits, shard by shard; a shard that fails keeps its messages.

        The first few jobs of the turn's fair order go first, in small claims of their own
        (``_claim_first``). A held job that came due meanwhile ends the turn after the
        shard at hand (once the turn has made one claim beyond those and claimed for
        ``_MIN_CUT_TURN``): the shards left keep their claims for the next turn, which
        takes the new job in fair order and claims it among its first. A turn of a whole
        claim batch takes about 0.2 s at full speed: the job would wait for it all. A due
        job from the express topic ends the turn after any claim beyond the head: such
        jobs are few (``_read_express``), and the next turn takes it before reading.
        """
        claims = 0  # beyond the head's: with a steady stream coming due, every turn is cut
        started = time.monotonic()
        for waiting, inline in (
            (self._head, True),
            (self._for_pool, False),
            (self._to_claim, True),
        ):
            for shard_id in list(waiting):
                if claims and (  # still 0 through the head: the head is never cut
                    self._read_express()
                    or (time.monotonic() - started >= _MIN_CUT_TURN and self._held_job_due())
                ):
                    return
                if not inline and self._pool_room() == 0:
                    break  # these wait for a thread; the inline ones below need none
                if not self._shards.is_open(shard_id):
                    continue
                items = waiting.pop(shard_id)
                if waiting is not self._head:
                    claims += 1
                try:
                    ran, claimed, rest = self._claim(shard_id, items, inline=inline)
                except DatabaseError as exc:
                    waiting[shard_id] = items + waiting.get(shard_id, [])
                    self._shard_failed(shard_id, "claim", exc)
                    continue
                self._shards.succeeded(shard_id)
                if rest:
                    self._for_pool[shard_id].extend(rest)
                self._started_or_dropped(pool, items, ran, claimed, rest)

    def _started_or_dropped(
        self,
        pool: ThreadPoolExecutor,
        items: list[_Item],
        ran: dict[tuple[str, int], Outcome],
        claimed: list[Attempt],
        rest: list[_Item],
    ) -> None:
        """Start what was claimed; acknowledge what ran inline or cannot run."""
        waiting = {id(received) for _, received in rest}
        started = {(a.job_id, a.attempt): a for a in claimed}
        done: list[Received] = []
        # Per user: jobs its fair order gave a turn that did not start here, refunded to
        # it (FairBuffer.refund). Mostly those another executor's work stealing started
        # first: charged, they were turns lost to their user. In traced 1:2:4 runs the
        # executor its peer stole from gave the weight-4 user 0.49-0.56 of its starts in
        # the second before that user's last 0.2 s, for a share of 0.571
        # (tools/bench/results/2026-11-27/22-refund.md).
        dropped: defaultdict[tuple[int, float, FairBuffer[_Item]], int] = defaultdict(int)
        for message, received in items:
            key = (message.job_id, message.attempt)
            outcome, attempt = ran.pop(key, None), started.pop(key, None)
            if outcome is not None and outcome.succeeded:
                done.append(received)  # committed with the claim
                _observe_finished(outcome)
            elif outcome is not None:
                self._to_record[message.shard_id].append((outcome, received))
            elif attempt is not None:
                self._start(pool, attempt, received)
            elif id(received) not in waiting:  # duplicate, stale or cancelled
                done.append(received)
                metrics.JOBS_PROCESSED.labels("dropped").inc()
                dropped[message.user_id, message.weight, self._buffer_of(message)] += 1
        for (user, weight, buffer), count in dropped.items():
            buffer.refund(user, weight, count)
            self._contested.add((buffer, user))
        self._handled(*done)

    def _pool_room(self) -> int:
        """Attempts that may be claimed for the handler threads now: the idle threads.

        An attempt claimed for a busy pool would wait in its queue while its lease (from
        the claim) runs out; a thread still busy with an attempt that timed out counts.
        """
        return max(0, self.config.concurrency - self._pool_busy)

    def _claim(
        self, shard_id: int, items: list[_Item], *, inline: bool
    ) -> tuple[dict[tuple[str, int], Outcome], list[Attempt], list[_Item]]:
        """Claim one shard's attempts in one transaction; run the inline ones inside it.

        An inline handler's attempt is started and marked succeeded in one write, and the
        handler runs before the commit: a job that never blocks costs one update, not
        two. One that failed is made running again and returned for ``_record``. The other
        attempts are claimed only as far as the handler threads are idle (``_pool_room``);
        the rest wait for a thread. Returns the inline attempts' outcomes, the other
        attempts (claimed) and the messages that wait. ``inline=False``: the messages'
        inline attempts were claimed already (they wait for a thread).

        Stolen jobs (executor_worker.work_stealing) are claimed after, in a transaction of
        their own that waits for no other's locks (see queries.CLAIM_UNLOCKED). If it
        fails they are dropped: the executor holding their messages runs them.
        """
        own = [item for item in items if item[1].partition != _STOLEN]
        stolen = [item for item in items if item[1].partition == _STOLEN]
        room = self._pool_room()
        ran, claimed, rest = self._claim_in_one(shard_id, own, inline=inline, room=room)
        if stolen:
            try:
                ran_stolen, claimed_stolen, rest_stolen = self._claim_in_one(
                    shard_id, stolen, inline=inline, room=room - len(claimed), stolen=True
                )
            except DatabaseError as exc:
                logger.info("shard %s: stolen jobs not claimed, dropped: %s", shard_id, exc)
            else:
                ran.update(ran_stolen)
                claimed += claimed_stolen
                rest += rest_stolen
        _observe_start_delay([*(outcome.attempt for outcome in ran.values()), *claimed])
        return ran, claimed, rest

    def _claim_in_one(
        self, shard_id: int, items: list[_Item], *, inline: bool, room: int, stolen: bool = False
    ) -> tuple[dict[tuple[str, int], Outcome], list[Attempt], list[_Item]]:
        """``_claim``'s transaction, for ``room`` handler threads."""
        if not items:
            return {}, [], []
        store = self._store(shard_id)
        with transaction.atomic(using=store.alias):
            now = time.monotonic()
            succeeded = (
                store.claim_succeeded(
                    [(m.job_id, m.attempt) for m, _ in items],
                    handlers=self._inline_handlers,
                    stolen=stolen,
                )
                if inline
                else []
            )
            ran = {(a.job_id, a.attempt): self.runner.run(a, started=now) for a in succeeded}
            failed = [outcome.attempt for outcome in ran.values() if not outcome.succeeded]
            if failed:
                store.reopen(failed)
            rest = [item for item in items if (item[0].job_id, item[0].attempt) not in ran]
            room = max(0, room)
            claimed = store.claim([(m.job_id, m.attempt) for m, _ in rest[:room]], stolen=stolen)
        return ran, claimed, rest[room:]

    def _shard_failed(self, shard_id: int, action: str, exc: DatabaseError) -> None:
        """Back off from the shard and drop its connection; a new one is made on next use."""
        delay = self._shards.failed(shard_id)
        logger.warning(
            "shard %s: %s failed, trying again in %.1f s: %s",
            shard_id,
            action,
            delay,
            exc,
            extra={"shard": shard_id, "action": action},
        )
        with contextlib.suppress(DatabaseError):  # it was broken: closed is what we want
            connections[shard_alias(shard_id)].close()

    def _start(self, pool: ThreadPoolExecutor, attempt: Attempt, received: Received) -> None:
        key = (attempt.job_id, attempt.attempt)
        running = _Running(math.inf, key, attempt, received)
        self._running[key] = running
        if self.runner.runs_inline(attempt):
            self._finished.put((self.runner.run(attempt, started=time.monotonic()), False))
        else:
            self._pool_busy += 1
            pool.submit(self._run_in_pool, attempt)

    def _run_in_pool(self, attempt: Attempt) -> None:
        """On a handler thread: the attempt's timeout starts now, not when it was claimed."""
        started = time.monotonic()
        self._started.put(((attempt.job_id, attempt.attempt), started))
        self._finished.put((self.runner.run(attempt, started=started), True))

    def _collect(self) -> None:
        while True:
            try:
                key, started = self._started.get_nowait()
            except queue.Empty:
                break
            running = self._running.get(key)
            if running is not None:
                running.deadline = started + running.attempt.timeout_seconds
                heapq.heappush(self._deadlines, running)
        while True:
            try:
                outcome, pooled = self._finished.get_nowait()
            except queue.Empty:
                break
            self._pool_busy -= pooled
            key = (outcome.attempt.job_id, outcome.attempt.attempt)
            running = self._running.pop(key, None)
            if running is not None:  # None: it timed out already, and that was recorded
                self._to_record[outcome.attempt.shard_id].append((outcome, running.received))
        now = time.monotonic()
        while self._deadlines and self._deadlines[0].deadline <= now:
            expired = heapq.heappop(self._deadlines)
            if self._running.get(expired.key) is expired:
                del self._running[expired.key]
                timeout = HandlerTimeout("attempt timed out")
                outcome = self.runner.failed(expired.attempt, timeout)
                self._to_record[expired.attempt.shard_id].append((outcome, expired.received))
        if not self._running:
            self._deadlines.clear()
        elif len(self._deadlines) > 2 * len(self._running) + _DEADLINES_SLACK:
            # A finished attempt stays in the heap until its deadline; with long timeouts
            # that is many attempts (and their messages) ago. Drop those now and then.
            self._deadlines = [r for r in self._deadlines if self._running.get(r.key) is r]
            heapq.heapify(self._deadlines)

    def _record(self) -> None:
        """Record outcomes shard by shard; a shard that fails keeps them for later."""
        for shard_id in list(self._to_record):
            if not self._shards.is_open(shard_id):
                continue
            items = self._to_record.pop(shard_id)
            finals = [item for item in items if _is_final(item[0])]
            others = [item for item in items if not _is_final(item[0])]
            try:
                if others:
                    self._store(shard_id).record([outcome for outcome, _ in others])
                    self._handled(*(received for _, received in others))
                    for outcome, _ in others:
                        _observe_finished(outcome)
                    others = []
                if finals and self._dead_letters.is_open(self.config.dead_letter_topic):
                    finals = self._fail(shard_id, finals)
            except DatabaseError as exc:
                self._shard_failed(shard_id, "record", exc)
            else:
                self._shards.succeeded(shard_id)
            if others or finals:
                self._to_record[shard_id].extend(others + finals)

    def _fail(self, shard_id: int, finals: list[_Result]) -> list[_Result]:
        """Fail attempts for good and dead-letter them; return those to try again later.

        One transaction: FAIL (rows locked) names the attempts it changed, their dead
        letters are published, and only an acknowledged publish lets it commit. So a dead
        letter is sent only for a job this executor failed, and nothing is failed without
        its letter; an attempt the sweeper took back is acknowledged without one. A crash
        (or a lost commit) after the acknowledgement leaves the attempt running: the
        sweeper retries it, or fails and dead-letters it again, keyed by the same job id
        (consumers drop the second: see ``jobsvc.messaging.dead_letter``).
        """
        store = self._store(shard_id)
        topic = self.config.dead_letter_topic
        try:
            with transaction.atomic(using=store.alias):
                if self.config.idle_transaction_limit:  # idle while the letters go out
                    store.allow_idle(
                        self.config.idle_transaction_limit + self.config.publish_timeout
                    )
                changed = store.fail([outcome for outcome, _ in finals])
                letters = [
                    _dead_letter(outcome)
                    for outcome, _ in finals
                    if (outcome.attempt.job_id, outcome.attempt.attempt) in changed
                ]
                if not dead_letters_publish(
                    producer=self.producer,
                    topic=topic,
                    letters=letters,
                    timeout=self.config.publish_timeout,
                ):
                    raise _DeadLettersUnacknowledged
        except _DeadLettersUnacknowledged:
            delay = self._dead_letters.failed(topic)
            logger.warning(
                "%d dead letters not acknowledged by %s; their jobs stay running, trying "
                "again in %.1f s",
                len(letters),
                topic,
                delay,
                extra={"shard": shard_id, "action": "dead_letter"},
            )
            return finals
        self._dead_letters.succeeded(topic)
        self._handled(*(received for _, received in finals))
        for outcome, _ in finals:
            key = (outcome.attempt.job_id, outcome.attempt.attempt)
            if key in changed:
                _observe_finished(outcome)
            else:
                logger.info(
                    "job %s: attempt %d was no longer running; not dead-lettered",
                    outcome.attempt.job_id,
                    outcome.attempt.attempt,
                    extra={"job_id": outcome.attempt.job_id, "action": "fail"},
                )
                metrics.JOBS_PROCESSED.labels("dropped").inc()
        return []

    def _store(self, shard_id: int) -> ClaimStore:
        store = self._stores.get(shard_id)
        if store is None:
            store = ClaimStore(
                shard_id=shard_id, lease_grace_seconds=self.config.lease_grace_seconds
            )
            self._stores[shard_id] = store
        return store


def _observe_start_delay(attempts: Iterable[Attempt]) -> None:
    started_at = timezone.now()
    for attempt in attempts:
        delay = (started_at - attempt.due_at).total_seconds()
        metrics.JOB_START_DELAY.observe(max(0.0, delay))


def _is_final(outcome: Outcome) -> bool:
    return not outcome.succeeded and outcome.retry_delay is None


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
