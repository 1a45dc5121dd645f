"""Where a dispatch round's messages go: which partitions, and which jobs to each.

A round's claimed jobs go to one partition per ``MESSAGES_PER_PARTITION`` of them
(``pick_partitions``), each partition's hand with the same share of every user's jobs
(``deal``), and each hand in weighted fair order (``in_send_order``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from scheduler_worker.fair_share import interleave
from scheduler_worker.shard_store import ClaimedJob

# A round goes to one partition for each this many of its messages (see pick_partitions).
MESSAGES_PER_PARTITION = 20


def pick_partitions(partition_count: int | None, messages: int) -> list[int] | None:
    """The partitions a round of ``messages`` goes to: one for each
    ``MESSAGES_PER_PARTITION`` messages, up to all of them, picked at random (None:
    each message to its key's, while the topic's partitions are not known). The round
    is dealt to them by ``deal``.

    Keys spread a round over every partition, so a small round becomes a batch of one or
    two messages per partition. Tansu, the local broker, pays for every stored batch on
    every fetch: at the design peak (1,389 jobs/s, rounds of about 17 jobs a shard) it
    used 0.2-0.8 of a core, growing with its log, and the whole stack 1.3-1.85 of the 2
    cores; with one batch per partition and round, Tansu 0.14-0.18 and the stack
    0.84-1.12, and started - due p99 fell from 267 to 65 ms (deploy/bench
    dispatch_lateness; the reports are in
    deploy/bench/results/2026-11-24/5-design-peak-partitions.md). Fewer, larger batches
    cost Apache Kafka less too (the reason for its sticky partitioner, KIP-480). A large
    round still goes to several partitions, and so to several executors: a flood's
    rounds sent whole, to the next partition each time, drained 100,000 jobs in 11.6 s
    against 9.0 s keyed. A round of 240 or more goes to every partition. Which
    partition a job is in decides nothing else: executors read every partition ahead of
    what they run and start what they hold in fair order.
    """
    if not partition_count:
        return None
    runs = min(partition_count, math.ceil(messages / MESSAGES_PER_PARTITION))
    return random.sample(range(partition_count), runs)


def in_send_order(
    by_user: dict[int, list[ClaimedJob]],
    weights: dict[int, float],
    picked: Sequence[int] | None,
) -> tuple[list[ClaimedJob], list[int] | None]:
    """The round's jobs in the order they are sent, and each one's partition (None: each
    to its key's): the ``picked`` partitions' hands one after another, each in fair order."""
    if picked is None:
        return interleave(by_user, weights), None
    ordered: list[ClaimedJob] = []
    partitions: list[int] = []
    for partition, hand in zip(picked, deal(by_user, len(picked)), strict=True):
        batch = interleave(hand, weights)
        ordered.extend(batch)
        partitions.extend([partition] * len(batch))
    return ordered, partitions


def deal(by_user: dict[int, list[ClaimedJob]], hands: int) -> list[dict[int, list[ClaimedJob]]]:
    """Deal a round's jobs into ``hands`` (one per partition), each with the same share of
    every user's jobs (to within one job) and of the round.

    As if dealing cards, one user's jobs after another's, hand by hand (a user with fewer
    jobs than hands gives them to the next hands in turn); but each hand gets a
    consecutive slice of a user's jobs, not every n-th one. Dealt every n-th job, a
    100,000-job flood drained in 7.5 and 8.4 s against 6.4 and 7.7 s cut into runs, in
    two alternated pairs of runs (deploy/bench light_user_wait); consecutive slices, in
    7.9 and 6.9 s against 9.5 and 9.4 s. A likely cause, not shown: a user's consecutive
    jobs sit together in the table, and the two executors then update alternate rows of
    the same pages.

    Cut into consecutive runs of the round's fair order instead, a round whose fair order
    ended with one user's jobs (the others had fewer due) gave that user's jobs to few
    partitions, so to one executor more than the other; the user's webhooks then ran out
    on one executor while hundreds waited on the other, and its share of the started jobs
    fell from 0.571 to 0.42 in the last seconds of its backlog
    (tests/e2e/test_fairness_end_to_end.py).
    """
    dealt: list[dict[int, list[ClaimedJob]]] = [{} for _ in range(hands)]
    next_hand = 0
    for user in sorted(by_user):
        jobs = by_user[user]
        start = 0
        for turn in range(min(hands, len(jobs))):
            size = len(jobs) // hands + (turn < len(jobs) % hands)
            dealt[(next_hand + turn) % hands][user] = jobs[start : start + size]
            start += size
        next_hand = (next_hand + len(jobs)) % hands
    return dealt
