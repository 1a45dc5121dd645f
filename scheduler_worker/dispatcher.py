"""Dispatching one shard: due jobs leave PostgreSQL for Kafka in weighted fair-share order.

One round (``dispatch_round``):

1. capacity = batch size, less what the in-flight cap leaves (published, unfinished jobs);
   at the cap, users with nothing in flight still get one job each
   (``_claim_for_idle_users``);
2. users with due jobs (a loose index scan: cost grows with users, not with jobs);
3. each user's quota from the fair-share allocator and the users' weights; users below
   their weighted share of the in-flight cap go first (``scheduler_worker.in_flight``);
4. claim: mark up to that many of each user's oldest due jobs queued, fenced by our epoch;
   capacity a user could not use goes to the others in a second pass;
5. send the claimed jobs to the broker, users interleaved by weight and dealt over a few
   partitions (``scheduler_worker.partition_deal``), without waiting for
   its acknowledgements: the next round starts at once (waiting would add the broker's
   round trip, tens of milliseconds, to every job's dispatch). The jobs of messages the
   broker failed are made due again at the start of the next round. At most
   ``_UNACKNOWLEDGED_ROUNDS`` rounds' worth of messages wait for acknowledgement at once.
   The jobs of a user with fewer than a few in flight on the shard go to the express
   topic instead (``express_lane``), which executors read ahead of the jobs topic: a job
   created due now by a user without a backlog does not queue behind another user's
   flood in the jobs topic's partitions.

"Due" means due within ``dispatch_ahead`` seconds: a job is sent that long before its due
time at most, and the executor that reads it holds it until it is due
(executor_worker.not_due). The trip through this round, the broker and the executor's
read is then made while the job waits anyway: under a flood each of those stages queues
for CPU, and together they took hundreds of milliseconds after the job was due.

A job is therefore always either scheduled in the database, or queued with a lease while
its message is published. If the worker dies between claim and acknowledgement, the sweeper
makes the job due again when the lease expires; a duplicate message that may result is
dropped by the executor's claim. A stopping dispatcher waits for its acknowledgements (at
most the publish timeout) and releases what failed before it lets the shard go.

The dispatch thread also runs the shard's sweeps between rounds
(``scheduler_worker.sweeper``). The messages awaiting acknowledgement are counted in
``scheduler_worker.acknowledgements``; the fairness gauges and counters are set by
``scheduler_worker.dispatch_metrics``.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from django.db import Error as DatabaseError
from django.db import connections

from jobsvc.messaging.job_message import JobMessage
from jobsvc.messaging.producer import Producer
from scheduler_worker import metrics
from scheduler_worker.acknowledgements import Unacknowledged
from scheduler_worker.dispatch_metrics import BackloggedGauges, observe_dispatched
from scheduler_worker.due_listener import DueListener
from scheduler_worker.errors import ShardFenced
from scheduler_worker.express_lane import express_jobs, express_quotas
from scheduler_worker.fair_share import FairShareAllocator, weight_of
from scheduler_worker.in_flight import InFlightLimit, ShardInFlight
from scheduler_worker.partition_deal import in_send_order, pick_partitions
from scheduler_worker.shard_store import ClaimedJob, ShardStore
from scheduler_worker.sweeper import ShardSweeper
from scheduler_worker.weights import WeightBook

logger = logging.getLogger(__name__)

_MAX_CLAIM_PASSES = 3
_ERROR_BACKOFF_SECONDS = 1.0  # after a database or broker error, before the next round
_UNACKNOWLEDGED_ROUNDS = 2  # full rounds of messages that may await acknowledgement
ROUND_RECORD_INTERVAL = 1.0  # seconds; at most one write of the last round's time per shard


class Weights(Protocol):
    """Users' job weights (scheduler_worker.weights.WeightBook)."""

    def weights_for(self, user_ids: Iterable[int]) -> dict[int, float]: ...


@dataclass(frozen=True)
class DispatchConfig:
    topic: str
    dead_letter_topic: str
    batch_size: int  # jobs per round
    max_in_flight: int  # per shard; 0 = no cap
    poll_interval: float  # seconds from a round's start to the next, when nothing was left
    queued_timeout: float  # seconds a published job may stay unclaimed
    sweep_interval: float  # seconds between sweeps for lost messages and executors
    publish_timeout: float  # seconds for the broker to acknowledge a message, or it fails
    # Seconds a published job should wait for an executor at most; the in-flight limit
    # follows it below max_in_flight (scheduler_worker.in_flight). 0: the fixed cap only.
    target_queue_wait: float = 0.0
    # Seconds before its due time a job may be dispatched; the executor holds it until it
    # is due (executor_worker.not_due). 0: only jobs already due.
    dispatch_ahead: float = 0.0
    # Where the jobs of a user with few in flight on the shard go
    # (scheduler_worker.express_lane); "" or a topic the broker does not know: the jobs
    # topic, like every other job.
    express_topic: str = ""
    # Listen on the shard's database for jobs created due now (jobsvc.jobs.due_now) and
    # send those of users with few in flight express at once (``dispatch_express``).
    listen_for_due: bool = False


class ShardDispatcher:
    """Runs dispatch rounds for one shard on its own thread while the worker owns it.

    States: starting (acquiring the lease epoch) -> running <-> paused -> stopped.
    ``pause()`` (ZooKeeper connection SUSPENDED) stops new claims at once; ``stop()``
    lets the current round finish. A fenced write (another worker took the shard) stops
    the dispatcher and reports it through ``on_fenced``.
    """

    def __init__(
        self,
        *,
        store: ShardStore,
        owner: str,
        producer: Producer,
        config: DispatchConfig,
        weight_refresh_seconds: float,
        on_fenced: Callable[[ShardDispatcher], None],
        clock: Callable[[], float],
        acquire_delay: float = 0.0,
        weights: Weights | None = None,
    ) -> None:
        self.store = store
        self.owner = owner
        self.producer = producer
        self.config = config
        self.on_fenced = on_fenced
        self.clock = clock
        self.epoch: int | None = None
        self.allocator = FairShareAllocator()
        self.weights = weights or WeightBook(refresh_seconds=weight_refresh_seconds, clock=clock)
        self._stopped = threading.Event()
        self._running = threading.Event()  # cleared while paused
        self._running.set()
        self._thread = threading.Thread(
            target=self._run, name=f"dispatch-shard-{store.shard_id}", daemon=True
        )
        self._next_round_record = 0.0
        self._shard_label = str(store.shard_id)
        self._unacknowledged = Unacknowledged()
        self._acquire_delay = acquire_delay  # seconds to wait before taking the lease
        # Since when every round failed (clock time), None while rounds succeed.
        self._failing_since: float | None = None
        self._backlogged = BackloggedGauges(shard_id=store.shard_id)
        self._sweeper = ShardSweeper(
            store=store,
            producer=producer,
            dead_letter_topic=config.dead_letter_topic,
            publish_timeout=config.publish_timeout,
            sweep_interval=config.sweep_interval,
            clock=clock,
        )
        self._due_listener: DueListener | None = None
        self._in_flight = ShardInFlight(
            store=store,
            max_in_flight=config.max_in_flight,
            batch_size=config.batch_size,
            clock=clock,
            limit=(
                InFlightLimit(
                    ceiling=config.max_in_flight,
                    floor=min(config.max_in_flight, max(1, config.batch_size // 8)),
                    target_wait=config.target_queue_wait,
                    step=max(1, config.batch_size // 8),
                    clock=clock,
                )
                if config.max_in_flight and config.target_queue_wait
                else None
            ),
        )

    # --- control, from any thread -----------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def stop(self) -> None:
        self._stopped.set()
        self._running.set()  # wake a paused thread so it can exit

    def join(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def failing_for(self) -> float:
        """Seconds since the last round that worked, if every round since has failed."""
        since = self._failing_since
        return 0.0 if since is None else max(0.0, self.clock() - since)

    # --- the dispatch thread ----------------------------------------------------------

    def _run(self) -> None:
        shard = self.store.shard_id
        try:
            if self._stopped.wait(self._acquire_delay):
                return
            self.epoch = self._acquire_lease()
            if self.epoch is None:
                return
            metrics.SHARD_FAILING.labels(self._shard_label).set(0)
            if self.config.listen_for_due and self.config.express_topic:
                self._due_listener = DueListener(
                    shard_id=shard, alias=self.store.alias, on_due=self.dispatch_express
                )
                self._due_listener.start()
            logger.info(
                "shard %s: dispatching under epoch %s",
                shard,
                self.epoch,
                extra={"shard": shard, "epoch": self.epoch, "action": "acquire"},
            )
            while not self._stopped.is_set():
                self._running.wait()
                if self._stopped.is_set():
                    break
                started = self.clock()
                published = self._guarded_round()
                self._record_round(started)
                if published < self.config.batch_size:
                    # Rounds start poll_interval apart: the round's own time counts toward
                    # the pause, so a job newly due waits at most about one interval.
                    pause = started + self.config.poll_interval - self.clock()
                    self._stopped.wait(max(0.0, pause))
            self._settle_publishing()
        except ShardFenced as exc:
            logger.warning(
                "shard %s fenced: %s", shard, exc, extra={"shard": shard, "action": "fenced"}
            )
            self.on_fenced(self)
        finally:
            if self._due_listener is not None:
                self._due_listener.stop()
                self._due_listener.join(_ERROR_BACKOFF_SECONDS)
            self._backlogged.forget()
            metrics.SHARD_FAILING.labels(self._shard_label).set(0)
            connections.close_all()  # this thread's: the shard's and the control database's

    def _settle_publishing(self) -> None:
        """Before the shard goes: wait for the broker's reports, release what failed."""
        limit = self.config.publish_timeout + _ERROR_BACKOFF_SECONDS
        if not self._unacknowledged.wait_below(1, limit):
            logger.warning(
                "shard %s: %d messages still unacknowledged; the sweeper will recover them",
                self.store.shard_id,
                self._unacknowledged.count,
            )
        try:
            self._release_failed()
        except DatabaseError as exc:
            logger.warning("shard %s: cannot release failed jobs: %s", self.store.shard_id, exc)

    def _acquire_lease(self) -> int | None:
        while not self._stopped.is_set():
            try:
                epoch = self.store.acquire_lease(owner=self.owner)
                self._round_worked()
                return epoch
            except DatabaseError as exc:
                logger.warning("shard %s: cannot take the lease yet: %s", self.store.shard_id, exc)
                self._round_failed()
                self._stopped.wait(_ERROR_BACKOFF_SECONDS)
        return None

    def _round_worked(self) -> None:
        if self._failing_since is not None:
            logger.info(
                "shard %s: dispatching again after %.1f s of errors",
                self.store.shard_id,
                self.failing_for(),
                extra={"shard": self.store.shard_id, "action": "recovered"},
            )
            self._failing_since = None
            metrics.SHARD_FAILING.labels(self._shard_label).set(0)

    def _round_failed(self) -> None:
        """After a database error: drop every connection this thread holds, count the time.

        Django replaces a broken connection only at request boundaries, and this thread has
        none; a connection the server ended (a restart, a failover, pg_terminate_backend)
        would fail every later round. The control database's (users' weights) goes too: the
        error may have come from it, and a healthy one is cheap to open again.
        """
        connections.close_all()
        if self._failing_since is None:
            self._failing_since = self.clock()
        metrics.SHARD_FAILING.labels(self._shard_label).set(1)

    def _record_round(self, now: float) -> None:
        """Write when this shard last had a round (the admin's cluster page shows it)."""
        if now < self._next_round_record:
            return
        self._next_round_record = now + ROUND_RECORD_INTERVAL
        try:
            self.store.record_round(epoch=self.epoch)
        except DatabaseError as exc:  # the next round's own queries report the database
            logger.debug("shard %s: cannot record the round: %s", self.store.shard_id, exc)

    def _guarded_round(self) -> int:
        """One round; database and broker trouble is logged and retried, fencing is not."""
        try:
            if self._sweeper.is_due():
                self._sweeper.sweep(epoch=self.epoch)
            published = self.dispatch_round()
        except DatabaseError as exc:
            logger.warning("shard %s: database error, retrying: %s", self.store.shard_id, exc)
            self._round_failed()
            self._stopped.wait(_ERROR_BACKOFF_SECONDS)
            return 0
        except ShardFenced:
            raise
        except Exception:
            # The producer raised instead of reporting (a fatal error), or a bug: the thread
            # must not end while the worker still owns the shard, or nobody dispatches it.
            # Jobs this round claimed stay queued until the sweeper makes them due again.
            logger.exception("shard %s: dispatch round failed, retrying", self.store.shard_id)
            self._round_failed()
            self._stopped.wait(_ERROR_BACKOFF_SECONDS)
            return 0
        self._round_worked()
        return published

    def dispatch_round(self) -> int:
        """Claim and publish one fair batch; return how many jobs were published."""
        with metrics.DISPATCH_ROUND.time():
            return self._dispatch_round()

    def _dispatch_round(self) -> int:
        self._release_failed()
        broker_room = self._broker_room()
        if broker_room <= 0:
            return 0
        capacity = min(broker_room, self._in_flight.room())
        users = self.store.due_users(ahead=self.config.dispatch_ahead)
        weights = self.weights.weights_for(users) if users else {}
        self._backlogged.observe(weights)
        if not users:
            return 0
        if not self._running.is_set():
            return 0  # paused (ZooKeeper connection suspended): claim nothing new
        in_flight = self._in_flight.counts(users)  # before this round's claims count
        # Held while the claim runs, so the due listener's claims cannot take it too.
        reserved = self._in_flight.reserve(capacity) if capacity > 0 else 0
        try:
            if reserved > 0:
                claimed = self._claim_fairly(reserved, users, weights)
            else:
                claimed = self._claim_for_idle_users(broker_room, self._in_flight.idle(in_flight))
            self._in_flight.claimed(claimed)
        finally:
            self._in_flight.release(reserved)
        return self._publish(claimed, weights, in_flight=in_flight)

    def dispatch_express(self, users: Iterable[int]) -> int:
        """On the due listener's thread: send the due jobs of ``users`` that have fewer
        than ``EXPRESS_IN_FLIGHT`` in flight on the shard to the express topic now, up to
        that many each and within the room the shard's in-flight limit leaves, less what
        a round in progress holds (``ShardInFlight.reserve``): at the limit the rounds
        give users with none in flight a job each; how many were sent.

        Created due now, such a job would otherwise wait for the round in progress and
        then be claimed in the next, among a flood's thousand (jobsvc.jobs.due_now). The
        claim is fenced by the epoch like a round's, and counted in flight like one
        (``ShardInFlight.claimed``); a database error leaves the jobs to the rounds.
        """
        if (
            self.epoch is None
            or self._stopped.is_set()
            or not self._running.is_set()
            or not self._express_available()
        ):
            return 0
        reserved = 0
        try:
            in_flight = self._in_flight.counts(users)
            reserved = self._in_flight.reserve(
                sum(express_quotas(in_flight, room=math.inf).values())
            )
            quotas = express_quotas(in_flight, room=reserved)  # at the limit: idle users
            if not quotas:
                return 0
            claimed = self.store.claim(
                epoch=self.epoch,
                quotas=quotas,
                queued_timeout=self.config.queued_timeout,
                ahead=self.config.dispatch_ahead,
            )
            self._in_flight.claimed(claimed)
        except (DatabaseError, ShardFenced) as exc:
            logger.info("shard %s: due jobs left to the rounds: %s", self.store.shard_id, exc)
            connections[self.store.alias].close()  # this thread's; a new one next time
            return 0
        finally:
            self._in_flight.release(reserved)
        if not claimed:
            return 0
        weights = self.weights.weights_for({job.user_id for job in claimed})
        self._send(self.config.express_topic, claimed, weights, partitions=None)
        metrics.JOBS_EXPRESS.labels(self._shard_label).inc(len(claimed))
        return len(claimed)

    def _express_available(self) -> bool:
        """Whether jobs may go express: a topic configured that the broker has, and an
        in-flight limit (without one, nothing is counted)."""
        return bool(
            self.config.express_topic
            and self.config.max_in_flight
            and self.producer.partition_count(self.config.express_topic)
        )

    def _release_failed(self) -> None:
        failed = self._unacknowledged.take_failed()
        if failed:
            try:
                self.store.release(epoch=self.epoch, job_ids=failed)
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

    def _broker_room(self) -> int:
        """Jobs this round may publish as far as the broker goes: a round's worth, less
        what it has not acknowledged yet beyond ``_UNACKNOWLEDGED_ROUNDS`` rounds."""
        limit = _UNACKNOWLEDGED_ROUNDS * self.config.batch_size
        if not self._unacknowledged.wait_below(limit, self.config.poll_interval):
            return 0  # the broker is behind: let it catch up before claiming more
        return min(self.config.batch_size, limit - self._unacknowledged.count)

    def _claim_fairly(
        self, capacity: int, users: list[int], weights: dict[int, float]
    ) -> list[ClaimedJob]:
        """Claim this round's jobs: one allocation, then top-ups of what drained users left.

        How many jobs each user has due is not known (counting them would cost what the
        loose index scan saves), so the allocation assumes every user could fill the whole
        capacity, or its room in flight (``ShardInFlight.rooms``) if that is less; users
        without room wait. A user that gets fewer jobs than its slots has run dry, and the
        unused slots go to the users that filled theirs and to those without room, by
        weight, in up to ``_MAX_CLAIM_PASSES - 1`` more claims. The allocator then learns
        what the round really gave (``settle``).
        """
        rooms = self._in_flight.rooms(users, weights)
        demand = {user: min(capacity, room) for user, room in rooms.items() if room > 0}
        quotas = self.allocator.allocate(capacity=capacity, demand=demand, weights=weights)
        claimed, filled = self._claim(quotas)
        drained = [user for user in quotas if user not in filled]
        # Capacity that users with room could not use goes to every user still backlogged,
        # by weight, the users at or over their share of the in-flight limit included: the
        # limit per user decides who goes first when capacity is short, not the throughput.
        filled += [user for user in users if rooms[user] <= 0]
        extra: Counter[int] = Counter()
        left = capacity - len(claimed)
        for _ in range(_MAX_CLAIM_PASSES - 1):
            if left <= 0 or not filled:
                break
            top_up = self.allocator.top_up(capacity=left, users=filled, weights=weights)
            batch, filled = self._claim(top_up)
            claimed.extend(batch)
            left -= len(batch)
            extra.update(job.user_id for job in batch)
            drained.extend(user for user in top_up if user not in filled)
            if not batch:
                break
        self.allocator.settle(extra=extra, drained=drained)
        return claimed

    def _claim_for_idle_users(self, room: int, idle: list[int]) -> list[ClaimedJob]:
        """At the in-flight limit: one job for each ``idle`` due user (none in flight).

        The limit keeps a flood's jobs waiting in the database rather than in the broker;
        it must not keep a user with nothing in flight waiting behind them. Held to it,
        the job of a user who creates it due now during another user's flood waited for
        the flood's jobs to finish and be counted (``IN_FLIGHT_RECOUNT_INTERVAL``), then
        for a round: from its due time to its dispatch p99 299-531 ms in four runs, and
        140-169 ms in three with this (deploy/bench light_user_due_now). Such a user then
        has a job in flight and waits for room like everyone else, so the limit is passed
        by at most one job per due user.
        """
        idle = idle[:room]
        if not idle:
            return []
        claimed, _ = self._claim(dict.fromkeys(idle, 1))
        metrics.JOBS_PAST_THE_LIMIT.labels(self._shard_label).inc(len(claimed))
        return claimed

    def _claim(self, quotas: dict[int, int]) -> tuple[list[ClaimedJob], list[int]]:
        """Claim up to each user's quota; also return the users who got their whole quota."""
        batch = self.store.claim(
            epoch=self.epoch,
            quotas=quotas,
            queued_timeout=self.config.queued_timeout,
            ahead=self.config.dispatch_ahead,
        )
        got = Counter(job.user_id for job in batch)
        return batch, [user for user, quota in quotas.items() if quota and got[user] >= quota]

    def _publish(
        self, claimed: list[ClaimedJob], weights: dict[int, float], *, in_flight: dict[int, int]
    ) -> int:
        """Send the claimed jobs' messages; the broker's reports arrive later. The jobs
        of users with few ``in_flight`` go to the express topic, if the broker has it
        (and only under an in-flight limit: without one, nothing is counted)."""
        if not claimed:
            return 0
        express: list[ClaimedJob] = []
        if self._express_available():
            express = express_jobs(claimed, in_flight=in_flight)
        if express:
            chosen = {job.job_id for job in express}
            claimed = [job for job in claimed if job.job_id not in chosen]
            self._send(self.config.express_topic, express, weights, partitions=None)
            metrics.JOBS_EXPRESS.labels(self._shard_label).inc(len(express))
        if not claimed:
            return len(express)
        by_user: dict[int, list[ClaimedJob]] = defaultdict(list)
        for job in claimed:
            by_user[job.user_id].append(job)
        picked = pick_partitions(self.producer.partition_count(self.config.topic), len(claimed))
        ordered, partitions = in_send_order(by_user, weights, picked)
        self._send(self.config.topic, ordered, weights, partitions=partitions)
        return len(express) + len(ordered)

    def _send(
        self,
        topic: str,
        jobs: list[ClaimedJob],
        weights: dict[int, float],
        *,
        partitions: list[int] | None,
    ) -> None:
        messages = [
            (job.job_id.encode(), self._message(job, weight_of(weights, job.user_id)).encode())
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

    def _message(self, job: ClaimedJob, weight: float) -> JobMessage:
        return JobMessage(
            job_id=job.job_id,
            shard_id=self.store.shard_id,
            user_id=job.user_id,
            attempt=job.attempts + 1,
            epoch=self.epoch,
            due_at=job.due_at,
            dispatched_at=job.dispatched_at,
            weight=weight,
            priority=job.priority,
            handler=job.handler,
        )
