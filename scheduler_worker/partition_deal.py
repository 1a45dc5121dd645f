"""Which partition each dispatched job goes to: where the user's jobs are started soonest.

Executors take the jobs topic's partitions with the round-robin assignor
(executor_worker.consumer): with N executors, partition i is the (i mod N)-th's. Each
executor starts the jobs it holds in weighted fair order, so every backlogged user must
have its share of jobs at every executor, or it runs dry at one while its jobs wait at
another. Dealing a user's jobs evenly is not enough: one executor starts jobs a little
faster than another (it got more CPU), so the same supply leaves the faster one short of
the user's jobs and piles them up at the slower one, which then runs them out alone.

So a user's new jobs go to the partitions that hold fewest of its jobs in flight (counted
per partition by scheduler_worker.in_flight): they fill the partitions up to one level,
as water does. A partition whose executor starts jobs faster has fewer in flight and
gets more, so every executor holds about as many of the user's jobs as the others and
runs out of them at about the same time. A partition whose executor is stopped gets
none until its jobs move on.

Partitions that hold the same number take turns, from where the user's previous round
left off, as if the jobs were dealt one by one; a user new to the shard starts at its
id, which spreads users' first jobs. Each partition gets a consecutive slice of the
user's jobs: a user's consecutive jobs sit together in the table, and executors updating
alternate rows of the same pages slowed the drain.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

_REMEMBERED_USERS = 100_000  # users whose next partition is kept; beyond, the last round's


class PartitionDealer:
    """Deals one shard's rounds; not thread-safe: the shard's dispatch thread owns it."""

    def __init__(self) -> None:
        self._next: dict[int, int] = {}  # per user: the partition its next tie goes to

    def deal(
        self,
        owners: Sequence[int],
        partition_count: int | None,
        held: Callable[[int, int], list[int]],
    ) -> list[int | None]:
        """The partition of each job, given its owner (a user id) in pick order; None
        for all if the partitions are not known yet (each goes to its key's).
        ``held(user, partition_count)``: the user's jobs in flight per partition."""
        if not partition_count:
            return [None] * len(owners)
        positions: dict[int, list[int]] = {}
        for position, user in enumerate(owners):
            positions.setdefault(user, []).append(position)
        if len(self._next) > _REMEMBERED_USERS:
            self._next = {user: p for user, p in self._next.items() if user in positions}
        partitions: list[int | None] = [None] * len(owners)
        for user, jobs in positions.items():
            first = self._next.get(user, user) % partition_count
            counts = water_fill(held(user, partition_count), len(jobs), first)
            start = 0
            for turn in range(partition_count):
                partition = (first + turn) % partition_count
                for position in jobs[start : start + counts[partition]]:
                    partitions[position] = partition
                start += counts[partition]
            self._next[user] = (first + len(jobs)) % partition_count
        return partitions


def water_fill(held: Sequence[int], jobs: int, first: int) -> list[int]:
    """How many of ``jobs`` new jobs each partition gets, so that the partitions' counts
    (``held`` plus new) end as level as they can: the lowest are raised first. Among
    partitions that hold the same, those nearest ``first`` (going up, wrapping) come first."""
    count = len(held)
    order = sorted(range(count), key=lambda p: (held[p], (p - first) % count))
    raised = 1  # order[:raised] are brought to held[order[raised - 1]] with `used` jobs
    used = 0
    while raised < count:
        step = raised * (held[order[raised]] - held[order[raised - 1]])
        if used + step > jobs:
            break
        used += step
        raised += 1
    each, extra = divmod(jobs - used, raised)
    level = held[order[raised - 1]] + each
    given = [0] * count
    for rank, partition in enumerate(order[:raised]):
        given[partition] = level - held[partition] + (rank < extra)
    return given
