"""A shard's jobs in flight (published, not finished yet) per user, and each user's room.

The scheduler *supplies* the executors, which decide the order jobs start in
(executor_worker.start_order; docs/design/fairness.md). Each user with jobs due may have
its weighted share of the shard's limit in flight, ``ceil(limit * weight / total weight
of the due users)``, at least one job; the rest of its due jobs wait in PostgreSQL. So
every backlogged user has jobs at every executor in proportion to its weight, and a user
with nothing in flight (a newcomer beside a flood) has room at once. Room that users
leave unused goes to those who filled theirs, by weight, within the limit (``spare``).

The limit sizes the shares; it takes nothing back. A user's jobs beyond its share (others
came due since, or the limit fell), and those of a user with none due any more, stay in
flight until the executors finish them: counted against the others' shares, jobs stuck
at a dead executor (until its partitions move) would hold everyone back.

The limit is in seconds of work: the rate the shard's jobs finish (``finish_rate``) times
``seconds_of_work``, from ``MIN_LIMIT`` up to ``max_in_flight``. The longer the executors
hold a user's last jobs, the further their start rates drift apart before those run out,
and the more its share falls in the second before its last start; a count of jobs is half
a second of no-op jobs but several seconds of webhook jobs. Jobs due at a steady rate
spend about the dispatch-ahead time in flight: a shorter limit sends them closer to their
due time.

The count is kept per partition too (``held``), so that new jobs go where they are started
soonest (scheduler_worker.partition_deal). It reads every queued and running row, so it
is made at most every ``RECOUNT_INTERVAL``; in between it is the last count plus the jobs
claimed since, so a stale count never lets a user past its share. Owned by the shard's
dispatch thread.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable

from scheduler_worker import metrics
from scheduler_worker.shard_store import ClaimedJob, ShardStore
from scheduler_worker.weights import weight_of

RECOUNT_INTERVAL = 0.1  # seconds between counts of the shard's jobs in flight
MIN_LIMIT = 100  # jobs a shard may have in flight whatever its finish rate (and at start)
RATE_WINDOW = 1.0  # seconds over which the finish rate is smoothed


class ShardInFlight:
    def __init__(
        self,
        *,
        store: ShardStore,
        max_in_flight: int,
        seconds_of_work: float,
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self.max_in_flight = max_in_flight
        self.seconds_of_work = seconds_of_work  # 0: the limit is max_in_flight
        # Jobs a second, smoothed over about RATE_WINDOW seconds. Until the executors' pace
        # is measured, as if they finished the maximum in a second of work: a start from
        # MIN_LIMIT would share 100 jobs by rounding up, one each to a hundred users
        # whatever their weights.
        self.finish_rate = max_in_flight / seconds_of_work if seconds_of_work else 0.0
        self._clock = clock
        self._label = str(store.shard_id)
        # As last counted, plus claimed since: per user, and per user and partition.
        self._by_user: Counter[int] = Counter()
        self._by_partition: Counter[tuple[int, int | None]] = Counter()
        self._counted_at = -math.inf

    def limit(self) -> int:
        """How many of the shard's jobs may be in flight now, shared by weight."""
        if not self.seconds_of_work:
            return self.max_in_flight
        work = math.ceil(self.finish_rate * self.seconds_of_work)
        return min(self.max_in_flight, max(MIN_LIMIT, work))

    def rooms(self, users: Iterable[int], weights: dict[int, float]) -> dict[int, int]:
        """Per due user: how many more of its jobs may be in flight now (0 or more)."""
        self._recount()
        shares = _by_weight(self.limit(), users, weights)
        return {user: max(0, share - self._by_user[user]) for user, share in shares.items()}

    def spare(self, users: Iterable[int], weights: dict[int, float]) -> dict[int, int]:
        """The room under the shard's limit that nobody's share holds now, shared by weight
        among ``users`` (those who filled their rooms this round)."""
        left = self.limit() - self._by_user.total()
        return _by_weight(left, users, weights) if left > 0 else {}

    def held(self, user: int, partition_count: int) -> list[int]:
        """The user's jobs in flight on each partition, as of the last count and claims."""
        return [self._by_partition[user, partition] for partition in range(partition_count)]

    def claimed(self, jobs: Iterable[ClaimedJob]) -> None:
        """Count jobs just claimed, until the next count sees them."""
        for job in jobs:
            self._by_user[job.user_id] += 1
            self._by_partition[job.user_id, job.partition] += 1

    def _recount(self) -> None:
        now = self._clock()
        if now < self._counted_at + RECOUNT_INTERVAL:
            return
        expected = self._by_user.total()  # as last counted, plus claimed since
        self._by_partition = Counter(self.store.in_flight())
        self._by_user = Counter()
        for (user, _), count in self._by_partition.items():
            self._by_user[user] += count
        finished, elapsed = max(0, expected - self._by_user.total()), now - self._counted_at
        if 0 < elapsed < math.inf:  # the first count only starts the measurement
            weight = 1.0 - math.exp(-elapsed / RATE_WINDOW)
            self.finish_rate += weight * (finished / elapsed - self.finish_rate)
        self._counted_at = now
        metrics.IN_FLIGHT.labels(self._label).set(self._by_user.total())
        metrics.IN_FLIGHT_LIMIT.labels(self._label).set(self.limit())


def _by_weight(amount: int, users: Iterable[int], weights: dict[int, float]) -> dict[int, int]:
    """``amount`` shared among ``users`` by weight, each share rounded up."""
    users = list(users)
    total = sum(weight_of(weights, user) for user in users)
    return {user: math.ceil(amount * weight_of(weights, user) / total) for user in users}
