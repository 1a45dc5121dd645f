"""A shard's jobs in flight (published, not finished yet) per user, and each user's room.

Each user with jobs due may have its weighted share of the shard's limit in flight:
``ceil(max_in_flight * weight / total weight of the due users)``, at least one job. Its
room is that share less what it has in flight; the rest of its due jobs wait in
PostgreSQL. This is how the scheduler *supplies* the executors, which decide the order
jobs start in (executor_worker.start_order): every backlogged user has jobs at every
executor in proportion to its weight, so none runs dry there while others do not, and a
user with nothing in flight (a newcomer beside a flood) has room at once. A user's jobs
in flight beyond its share (others became due since) are not taken back; it gets no more
until its executors have started enough of them.

Room that users leave unused (they have fewer jobs due than their share: a steady stream
beside a flood) goes to the users who filled theirs, by weight, as long as the shard's
total stays within the limit (``spare``): the limit is shared, not split.

The limit sizes the shares; it does not cap every job in flight. A user's jobs beyond its
share (it had the whole limit before a newcomer came due), and the jobs still in flight
of a user with none due any more, are over it until the executors finish them: in
``fairness_webhooks``, a shard held 2,858 jobs for seconds after the heaviest user's last
due job there was claimed. Counting a user with none due against the others' shares would
let its jobs stuck at a dead executor (until its partitions move) hold everyone back.

The count is also kept per partition of the jobs topic (``held``): how many of a user's
jobs each partition's executor has not finished yet, so that new jobs go where they are
started soonest (scheduler_worker.partition_deal).

The count reads every queued and running row of the shard, so it is made at most every
``RECOUNT_INTERVAL``; in between, it is the last count plus the jobs claimed since. Jobs
that finished meanwhile are seen at the next count, so a stale count never lets a user
past its share. Owned by the shard's dispatch thread.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterable

from scheduler_worker import metrics
from scheduler_worker.shard_store import ClaimedJob, ShardStore
from scheduler_worker.weights import weight_of

RECOUNT_INTERVAL = 0.1  # seconds between counts of the shard's jobs in flight


class ShardInFlight:
    def __init__(
        self,
        *,
        store: ShardStore,
        max_in_flight: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.max_in_flight = max_in_flight
        self._clock = clock
        self._label = str(store.shard_id)
        # As last counted, plus claimed since: per user, and per user and partition.
        self._by_user: Counter[int] = Counter()
        self._by_partition: Counter[tuple[int, int | None]] = Counter()
        self._recount_at = -math.inf

    def rooms(self, users: Iterable[int], weights: dict[int, float]) -> dict[int, int]:
        """Per due user: how many more of its jobs may be in flight now (0 or more)."""
        users = list(users)
        self._recount()
        total = sum(weight_of(weights, user) for user in users)
        return {
            user: max(
                0,
                math.ceil(self.max_in_flight * weight_of(weights, user) / total)
                - self._by_user[user],
            )
            for user in users
        }

    def spare(self, users: Iterable[int], weights: dict[int, float]) -> dict[int, int]:
        """The room under the shard's limit that nobody's share holds now, shared by weight
        among ``users`` (those who filled their rooms this round); rounded up."""
        users = list(users)
        left = self.max_in_flight - self._by_user.total()
        if left <= 0 or not users:
            return {}
        total = sum(weight_of(weights, user) for user in users)
        return {user: math.ceil(left * weight_of(weights, user) / total) for user in users}

    def held(self, user: int, partition_count: int) -> list[int]:
        """The user's jobs in flight on each partition, as of the last count and claims."""
        return [self._by_partition[user, partition] for partition in range(partition_count)]

    def claimed(self, jobs: Iterable[ClaimedJob]) -> None:
        """Count jobs just claimed, until the next count sees them."""
        for job in jobs:
            self._by_user[job.user_id] += 1
            self._by_partition[job.user_id, job.partition] += 1

    def total(self) -> int:
        return self._by_user.total()

    def _recount(self) -> None:
        now = self._clock()
        if now < self._recount_at:
            return
        self._by_partition = Counter(self.store.in_flight())
        self._by_user = Counter()
        for (user, _), count in self._by_partition.items():
            self._by_user[user] += count
        self._recount_at = now + RECOUNT_INTERVAL
        metrics.IN_FLIGHT.labels(self._label).set(self._by_user.total())
