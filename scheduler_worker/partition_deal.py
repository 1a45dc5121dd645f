"""Where a shard's dispatch rounds' messages go: which partitions, and which jobs to each.

A round's claimed jobs go to one partition per ``MESSAGES_PER_PARTITION`` of them, the
partitions after the last round's (``pick_partitions``); each user's jobs are dealt
over them from where its last round's jobs left off (``deal``); and each partition's
hand goes in weighted fair order (``in_send_order``). ``PartitionDealer``
keeps where the last round and each user's last job went.

Executors take the jobs topic's partitions with the round-robin assignor
(executor_worker.consumer): with N executors, partition i is the (i mod N)-th's, so
consecutive partitions are different executors' in turn, and so, in rounds that go to
every partition (any flood's), are a user's consecutive jobs on a shard. That matters
because each executor starts the jobs it holds in fair order among the users it holds
jobs of: a user with more jobs in one executor than in the other runs dry in the
second, where it then has fewer turns than the others, while its jobs wait in the
first. Dealt from wherever a round's hands began, with the range
assignor (each executor a block of partitions), a user's jobs per executor drifted
apart as a random walk over the rounds. With 1,000 weight-1 users of 200 jobs each
(tools/bench fairness_thousand_users), traced in one run: the two users furthest
behind, 21 jobs short when the first user was done, had 122 and 123 jobs started in a
row by one executor, while the other ran out of theirs 16 and 18 times, mostly after
runs of 1-5 jobs (tools/bench/results/2026-11-27/28-dealing-by-executor.md).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from scheduler_worker.fair_share import interleave
from scheduler_worker.shard_store import ClaimedJob

# A round goes to one partition for each this many of its messages (see pick_partitions).
MESSAGES_PER_PARTITION = 20
# Users whose next hand a dealer remembers; beyond this many, only those of the last round.
_REMEMBERED_USERS = 100_000


class PartitionDealer:
    """Deals one shard's rounds over the partitions (see the module's docstring); not
    thread-safe: the shard's dispatch thread owns it."""

    def __init__(self, *, first_partition: int | None = None) -> None:
        self._next_partition = (
            random.randrange(2**31) if first_partition is None else first_partition
        )
        self._next_hand: dict[int, int] = {}  # per user: where its next job goes

    def in_send_order(
        self,
        by_user: dict[int, list[ClaimedJob]],
        weights: dict[int, float],
        partition_count: int | None,
    ) -> tuple[list[ClaimedJob], list[int] | None]:
        """A round's jobs in the order they are sent, and each one's partition (None:
        each to its key's, while the topic's partitions are not known)."""
        messages = sum(len(jobs) for jobs in by_user.values())
        picked = pick_partitions(partition_count, messages, first=self._next_partition)
        if picked and partition_count:
            self._next_partition = (picked[-1] + 1) % partition_count
        if len(self._next_hand) > _REMEMBERED_USERS:
            self._next_hand = {u: h for u, h in self._next_hand.items() if u in by_user}
        return in_send_order(by_user, weights, picked, self._next_hand)


def pick_partitions(
    partition_count: int | None, messages: int, *, first: int = 0
) -> list[int] | None:
    """The partitions a round of ``messages`` goes to: one for each
    ``MESSAGES_PER_PARTITION`` messages, up to all of them, consecutive from ``first``
    (None: each message to its key's, while the topic's partitions are not known). The
    round is dealt to them by ``deal``.

    Keys spread a round over every partition, so a small round becomes a batch of one or
    two messages per partition; fewer, larger batches cost the broker less per message
    (the reason for Kafka's sticky partitioner, KIP-480). A large
    round still goes to several partitions, and so to several executors: a flood's
    rounds sent whole, to the next partition each time, drained 100,000 jobs in 11.6 s
    against 9.0 s keyed. A round of 240 or more goes to every partition. Which
    partition a job is in decides nothing else: executors read every partition ahead of
    what they run and start what they hold in fair order.
    """
    if not partition_count:
        return None
    runs = min(partition_count, math.ceil(messages / MESSAGES_PER_PARTITION))
    return [(first + i) % partition_count for i in range(runs)]


def in_send_order(
    by_user: dict[int, list[ClaimedJob]],
    weights: dict[int, float],
    picked: Sequence[int] | None,
    next_hand: dict[int, int],
) -> tuple[list[ClaimedJob], list[int] | None]:
    """The round's jobs in the order they are sent, and each one's partition (None: each
    to its key's): the ``picked`` partitions' hands one after another, each in fair order
    (``next_hand``: see ``deal``)."""
    if picked is None:
        return interleave(by_user, weights), None
    ordered: list[ClaimedJob] = []
    partitions: list[int] = []
    for partition, hand in zip(picked, deal(by_user, len(picked), next_hand), strict=True):
        batch = interleave(hand, weights)
        ordered.extend(batch)
        partitions.extend([partition] * len(batch))
    return ordered, partitions


def deal(
    by_user: dict[int, list[ClaimedJob]], hands: int, next_hand: dict[int, int]
) -> list[dict[int, list[ClaimedJob]]]:
    """Deal a round's jobs into ``hands`` (one per partition), each with the same share of
    every user's jobs (to within one job).

    Each user's jobs go to the hands in turn, from ``next_hand[user]`` (the hand after
    its last job's in the rounds before; a user new to the shard starts at its id),
    which is then moved past them: over the rounds, a user's jobs go to every hand in
    turn, as if one deck were dealt, so every executor gets its share of each user's
    (see the module's docstring). Users' ids spread their first jobs over the hands.

    Each hand gets a consecutive slice of a user's jobs, not every n-th one. Dealt every
    n-th job, a 100,000-job flood drained in 7.5 and 8.4 s against 6.4 and 7.7 s cut
    into runs, in two alternated pairs of runs (tools/bench light_user_wait);
    consecutive slices, in 7.9 and 6.9 s against 9.5 and 9.4 s. A likely cause, not
    shown: a user's consecutive jobs sit together in the table, and the two executors
    then update alternate rows of the same pages.

    Cut into consecutive runs of the round's fair order instead, a round whose fair order
    ended with one user's jobs (the others had fewer due) gave that user's jobs to few
    partitions, so to one executor more than the other; the user's webhooks then ran out
    on one executor while hundreds waited on the other, and its share of the started jobs
    fell from 0.571 to 0.42 in the last seconds of its backlog
    (tests/e2e/test_fairness_end_to_end.py).
    """
    dealt: list[dict[int, list[ClaimedJob]]] = [{} for _ in range(hands)]
    for user in sorted(by_user):
        jobs = by_user[user]
        first = next_hand.get(user, user)
        start = 0
        for turn in range(min(hands, len(jobs))):
            size = len(jobs) // hands + (turn < len(jobs) % hands)
            dealt[(first + turn) % hands][user] = jobs[start : start + size]
            start += size
        next_hand[user] = first + len(jobs)
    return dealt
