"""A shard's dispatch rounds: due jobs leave PostgreSQL for Kafka in weighted fair-share order.

One round (``dispatch_round``):

1. users with due jobs (a loose index scan: cost grows with users, not with jobs);
2. capacity = the round's size (the batch size, or a few jobs per due user if that is
   more: ``round_size``), less what the in-flight cap leaves (published, unfinished
   jobs); at the cap, users with nothing in flight still get one job each
   (``_claim_for_idle_users``);
3. each user's quota from the fair-share allocator and the users' weights; users below
   their weighted share of the in-flight cap go first (``scheduler_worker.in_flight``);
4. claim: mark up to that many of each user's oldest due jobs queued, fenced by our epoch;
   capacity a user could not use goes to the others in a second pass;
5. publish the claimed jobs without waiting for the broker (``scheduler_worker.shard_publisher``):
   users interleaved by weight, and those with few in flight on the shard to the express
   topic, which executors read ahead of the jobs topic: a job created due now by a user
   without a backlog does not queue behind another user's flood. A round first releases
   the jobs whose messages the broker failed, and claims no more than the broker has room
   for.

Between rounds the due listener may send a user's jobs created due now express at once
(``dispatch_express``), within the same in-flight limit.

"Due" means due within ``dispatch_ahead`` seconds: a job is sent that long before its due
time at most, and the executor that reads it holds it until it is due
(executor_worker.not_due). The trip through this round, the broker and the executor's
read is then made while the job waits anyway: under a flood each of those stages queues
for CPU, and together they took hundreds of milliseconds after the job was due.

Who runs the rounds, holds the lease and sweeps is ``scheduler_worker.dispatcher``. The
fairness gauges and counters are set by ``scheduler_worker.dispatch_metrics``.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Protocol

from django.db import Error as DatabaseError
from django.db import connections

from jobsvc.messaging.producer import Producer
from scheduler_worker import metrics
from scheduler_worker.dispatch_config import DispatchConfig
from scheduler_worker.dispatch_metrics import BackloggedGauges
from scheduler_worker.errors import ShardFenced
from scheduler_worker.express_lane import express_quotas
from scheduler_worker.fair_share import FairShareAllocator
from scheduler_worker.in_flight import InFlightLimit, ShardInFlight
from scheduler_worker.shard_publisher import ShardPublisher
from scheduler_worker.shard_store import ClaimedJob, ShardStore

logger = logging.getLogger(__name__)

_MAX_CLAIM_PASSES = 3


def round_size(batch_size: int, due_users: int, *, jobs_per_user: int) -> int:
    """How many jobs a round may claim: ``batch_size``, or ``jobs_per_user`` for each due
    user if that is more (the in-flight limit and the broker's room still apply).

    A round costs about as much per due user as per job: the loose index scan finds each
    user, the claim probes each user's due range, the allocation and the publishing order
    go through every user. With a thousand users due on a shard, a round of 1,000 jobs
    gave each one job and took 0.5 s, and the schedulers, not the executors, set the
    drain rate, the executors using under half a core of the two (tools/bench
    fairness_thousand_users). A few jobs per user and round are as fair: the allocation
    gives each user its weighted share of the round. Such a round waits for room for
    half of it under the in-flight limit (``ShardInFlight.worth_a_round``): rounds of a
    few hundred jobs for a thousand users, as fast as room came, made that drain 15 %
    slower (tools/bench/results/2026-11-27/26-round-size.md).
    """
    return max(batch_size, jobs_per_user * due_users)


class Weights(Protocol):
    """Users' job weights (scheduler_worker.weights.WeightBook)."""

    def weights_for(self, user_ids: Iterable[int]) -> dict[int, float]: ...


class ShardRounds:
    """What one shard sends to the broker, and in which order; not a thread of its own.

    ``epoch`` is the shard's lease, set by whoever took it; nothing is claimed without it.
    ``pause()`` (ZooKeeper connection SUSPENDED) stops new claims until ``resume()``;
    ``stop()`` stops them for good. ``dispatch_round`` runs on the dispatch thread,
    ``dispatch_express`` on the due listener's; the in-flight count keeps them apart.
    """

    def __init__(
        self,
        *,
        store: ShardStore,
        producer: Producer,
        config: DispatchConfig,
        weights: Weights,
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self.config = config
        self.weights = weights
        self.epoch: int | None = None
        self.allocator = FairShareAllocator()
        self._claiming = threading.Event()  # cleared while paused
        self._claiming.set()
        self._stopped = False
        self._shard_label = str(store.shard_id)
        self.publisher = ShardPublisher(store=store, producer=producer, config=config)
        self._backlogged = BackloggedGauges(shard_id=store.shard_id)
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

    def pause(self) -> None:
        self._claiming.clear()

    def resume(self) -> None:
        self._claiming.set()

    def stop(self) -> None:
        """No claims from here on; wakes ``wait_resumed``."""
        self._stopped = True
        self._claiming.set()

    def wait_resumed(self) -> None:
        """Until ``resume()`` or ``stop()``, if paused."""
        self._claiming.wait()

    # --- on the dispatch thread -------------------------------------------------------

    def settle(self, timeout: float) -> None:
        """Before the shard goes: wait for the broker's reports, release what failed."""
        self.publisher.settle(timeout, epoch=self.epoch)

    def forget(self) -> None:
        """The shard is gone from this worker: its fairness gauges go too."""
        self._backlogged.forget()

    def dispatch_round(self) -> int:
        """Claim and publish one fair batch; return how many jobs were published."""
        with metrics.DISPATCH_ROUND.time():
            return self._dispatch_round()

    def _dispatch_round(self) -> int:
        self.publisher.release_failed(epoch=self.epoch)
        users = self.store.due_users(ahead=self.config.dispatch_ahead)
        weights = self.weights.weights_for(users) if users else {}
        self._backlogged.observe(weights)
        if not users:
            return 0
        size = round_size(
            self.config.batch_size, len(users), jobs_per_user=self.config.round_jobs_per_user
        )
        broker_room = self.publisher.room(size)
        if broker_room <= 0:
            return 0
        capacity = min(broker_room, self._in_flight.room())
        if size > self.config.batch_size and capacity < self._in_flight.worth_a_round(size):
            capacity = 0  # a round sized by its users waits for room for half of it
        if not self._claiming.is_set():
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
        return self.publisher.publish(claimed, weights, in_flight=in_flight, epoch=self.epoch)

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
            or self._stopped
            or not self._claiming.is_set()
            or not self.publisher.express_available()
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
            claimed, _ = self._claim(quotas)
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
        self.publisher.send_express(claimed, weights, epoch=self.epoch)
        return len(claimed)

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
        filled |= {user for user in users if rooms[user] <= 0}
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
        140-169 ms in three with this (tools/bench light_user_due_now). Such a user then
        has a job in flight and waits for room like everyone else, so the limit is passed
        by at most one job per due user.
        """
        idle = idle[:room]
        if not idle:
            return []
        claimed, _ = self._claim(dict.fromkeys(idle, 1))
        metrics.JOBS_PAST_THE_LIMIT.labels(self._shard_label).inc(len(claimed))
        return claimed

    def _claim(self, quotas: dict[int, int]) -> tuple[list[ClaimedJob], set[int]]:
        """Claim up to each user's quota; also return the users who got their whole quota
        (a set: a round may have a thousand users to look up in it)."""
        batch = self.store.claim(
            epoch=self.epoch,
            quotas=quotas,
            queued_timeout=self.config.queued_timeout,
            ahead=self.config.dispatch_ahead,
        )
        got = Counter(job.user_id for job in batch)
        return batch, {user for user, quota in quotas.items() if quota and got[user] >= quota}
