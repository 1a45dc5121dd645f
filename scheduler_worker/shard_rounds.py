"""A shard's dispatch rounds: due jobs leave PostgreSQL for Kafka, each user up to its room.

One round (``dispatch_round``):

1. users with due jobs (a loose index scan: cost grows with users, not with jobs), and
   their weights;
2. each user's room: its weighted share of the shard's in-flight limit, less its jobs in
   flight (``scheduler_worker.in_flight``); a round claims ``ROUND_MAX_JOBS`` at most,
   each user's room scaled down alike (a limit far above the jobs one claim statement
   and one batch of messages should carry);
3. claim: mark up to that many of each user's due jobs queued, highest priority first,
   then oldest, fenced by our epoch, each with the partition it goes to: the user's jobs
   go to the partitions that hold fewest of them in flight
   (``scheduler_worker.partition_deal``); then, if the shard is below its limit, the room
   left goes to the users who filled theirs, by weight, in a second claim
   (``ShardInFlight.spare``);
4. publish them in weighted turns on each partition (``in_turns``), without waiting for the broker
   (``scheduler_worker.shard_publisher``). A round first releases the jobs whose
   messages the broker failed.

"Due" means due within ``dispatch_ahead`` seconds: a job is sent that long before its due
time at most, and the executor that reads it holds it until it is due by the database's
clock. The trip through this round, the broker and the executor's read is then made while
the job waits anyway.

Who runs the rounds, holds the lease and sweeps is ``scheduler_worker.dispatcher``.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Protocol

from jobsvc.messaging.producer import Producer
from scheduler_worker import metrics
from scheduler_worker.dispatch_config import DispatchConfig
from scheduler_worker.dispatch_metrics import BackloggedGauges
from scheduler_worker.errors import MessagesNotAcknowledged
from scheduler_worker.in_flight import ShardInFlight
from scheduler_worker.partition_deal import PartitionDealer
from scheduler_worker.shard_publisher import ShardPublisher
from scheduler_worker.shard_store import ClaimedJob, ShardStore
from scheduler_worker.weights import weight_of

ROUND_MAX_JOBS = 2000  # jobs one round claims at most, over all its users


class Weights(Protocol):
    """Users' job weights (scheduler_worker.weights.WeightBook)."""

    def weights_for(self, user_ids: Iterable[int]) -> dict[int, float]: ...


class ShardRounds:
    """What one shard sends to the broker; not a thread of its own.

    ``epoch`` is the shard's lease, set by whoever took it; nothing is claimed without it.
    ``pause()`` (ZooKeeper connection SUSPENDED) stops new claims until ``resume()``, which
    also wakes ``wait_resumed``. ``dispatch_round`` runs on the dispatch thread.
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
        self._claiming = threading.Event()  # cleared while paused
        self._claiming.set()
        self.producer = producer
        self.publisher = ShardPublisher(store=store, producer=producer, config=config)
        self._dealer = PartitionDealer()
        self._backlogged = BackloggedGauges(shard_id=store.shard_id)
        self.in_flight = ShardInFlight(
            store=store,
            max_in_flight=config.max_in_flight,
            seconds_of_work=config.in_flight_seconds,
            clock=clock,
        )

    # --- control, from any thread -----------------------------------------------------

    def pause(self) -> None:
        self._claiming.clear()

    def resume(self) -> None:
        self._claiming.set()

    def wait_resumed(self) -> None:
        self._claiming.wait()

    # --- on the dispatch thread -------------------------------------------------------

    def forget(self) -> None:
        """The shard is gone from this worker: its fairness gauges go too."""
        self._backlogged.forget()

    def dispatch_round(self) -> int:
        """Claim and publish each due user's room; return how many jobs were published."""
        with metrics.DISPATCH_ROUND.time():
            if self.publisher.release_failed(epoch=self.epoch):
                # Counted as a failed round, so that a scheduler cut off from the broker
                # steps back while others can publish (scheduler_worker.worker).
                raise MessagesNotAcknowledged(f"shard {self.store.shard_id}")
            users = self.store.due_users(ahead=self.config.dispatch_ahead)
            weights = self.weights.weights_for(users) if users else {}
            self._backlogged.observe(weights)
            if not users or not self._claiming.is_set():
                return 0  # nothing due, or paused (ZooKeeper connection suspended)
            quotas = round_quotas(self.in_flight.rooms(users, weights), ROUND_MAX_JOBS)
            if not quotas:
                return 0
            claimed = self._claim(quotas)
            got = Counter(job.user_id for job in claimed)
            filled = [user for user, quota in quotas.items() if got[user] >= quota]
            spare = round_quotas(self.in_flight.spare(filled, weights), ROUND_MAX_JOBS)
            if spare:
                claimed += self._claim(spare)
            return self.publisher.publish(in_turns(claimed, weights), weights, epoch=self.epoch)

    def _claim(self, quotas: dict[int, int]) -> list[ClaimedJob]:
        # Asked before the claim's transaction opens: an expired metadata cache means a
        # request to the broker (up to a second when it is down), which must not hold the
        # transaction, and its lock on the lease row, open meanwhile.
        partition_count = self.producer.partition_count(self.config.topic)
        claimed = self.store.claim(
            epoch=self.epoch,
            quotas=quotas,
            queued_timeout=self.config.queued_timeout,
            ahead=self.config.dispatch_ahead,
            deal=lambda owners: self._dealer.deal(owners, partition_count, self.in_flight.held),
        )
        self.in_flight.claimed(claimed)
        return claimed


def round_quotas(rooms: dict[int, int], most: int) -> dict[int, int]:
    """The users with room, each to claim up to its room, scaled down alike (rounded up)
    if the rooms add up to more than ``most``."""
    rooms = {user: room for user, room in rooms.items() if room > 0}
    total = sum(rooms.values())
    if total <= most:
        return rooms
    return {user: math.ceil(room * most / total) for user, room in rooms.items()}


def in_turns(jobs: list[ClaimedJob], weights: dict[int, float]) -> list[ClaimedJob]:
    """The round's jobs in weighted turns on each partition, each user's in the order
    claimed. An executor holds what it has read of its partitions, in the order sent. A
    claim returns the jobs user by user, and a user's jobs go to the partitions in
    consecutive slices (scheduler_worker.partition_deal): in claim order the executors
    would hold the first users' jobs before the last users' (the heaviest user of a 1:2:4
    drain then started 0.47 of the first second's jobs, against 0.57); in turns over the
    whole round, each partition would start with one user's slice. So a user's n-th job
    on a partition goes at n / weight."""
    taken: Counter[tuple[int, int | None]] = Counter()

    def turn(job: ClaimedJob) -> float:
        taken[job.user_id, job.partition] += 1
        return taken[job.user_id, job.partition] / weight_of(weights, job.user_id)

    return sorted(jobs, key=turn)  # keys computed once each, in order; ties keep it
