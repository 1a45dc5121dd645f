"""Which partition each dispatched job goes to: every user's jobs dealt over the partitions.

Executors take the jobs topic's partitions with the round-robin assignor
(executor_worker.consumer): with N executors, partition i is the (i mod N)-th's. Each
executor starts the jobs it holds in weighted fair order, so every backlogged user must
have its share of jobs at every executor, or it runs dry at one while its jobs wait at
another. A user's jobs of a round are cut into consecutive slices, one per partition from
where the user's previous round left off, the first ones a job larger, as if the round's
jobs were dealt one by one; the next round goes on from there. So every partition (and
executor) gets each user's jobs to within one, whatever the round sizes; a user new to
the shard starts at its id, which spreads users' first jobs. Consecutive slices
rather than every n-th job: a user's consecutive jobs sit together in the table, and
executors updating alternate rows of the same pages slowed the drain.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from scheduler_worker.shard_store import ClaimedJob

_REMEMBERED_USERS = 100_000  # users whose next partition is kept; beyond, the last round's


class PartitionDealer:
    """Deals one shard's rounds; not thread-safe: the shard's dispatch thread owns it."""

    def __init__(self) -> None:
        self._next: dict[int, int] = {}  # per user: the partition its next job goes to

    def deal(
        self, jobs: Sequence[ClaimedJob], partition_count: int | None
    ) -> tuple[list[ClaimedJob], list[int] | None]:
        """The jobs in sending order and each one's partition (None: the partitions are
        not known yet; each goes to its key's)."""
        if not partition_count:
            return list(jobs), None
        by_user: dict[int, list[ClaimedJob]] = defaultdict(list)
        for job in jobs:
            by_user[job.user_id].append(job)
        if len(self._next) > _REMEMBERED_USERS:
            self._next = {user: p for user, p in self._next.items() if user in by_user}
        ordered: list[ClaimedJob] = []
        partitions: list[int] = []
        for user, user_jobs in by_user.items():
            first = self._next.get(user, user)
            hands = min(partition_count, len(user_jobs))
            start = 0
            for hand in range(hands):
                size = len(user_jobs) // hands + (hand < len(user_jobs) % hands)
                ordered += user_jobs[start : start + size]
                partitions += [(first + hand) % partition_count] * size
                start += size
            self._next[user] = (first + len(user_jobs)) % partition_count
        return ordered, partitions
