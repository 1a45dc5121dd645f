"""How a shard's dispatch rounds' jobs are dealt over partitions (pure logic, no servers)."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import UTC, datetime

import pytest

from scheduler_worker.partition_deal import (
    MESSAGES_PER_PARTITION,
    PartitionDealer,
    deal,
    in_send_order,
    pick_partitions,
)
from scheduler_worker.shard_store import ClaimedJob

NOW = datetime(2026, 11, 25, tzinfo=UTC)


def jobs_of(**counts: int) -> dict[int, list[ClaimedJob]]:
    """``u1=5`` -> user 1's five jobs, ids in their due order."""
    result = {}
    for name, count in counts.items():
        user = int(name[1:])
        result[user] = [ClaimedJob(f"{user}-{i}", user, 0, NOW, NOW) for i in range(count)]
    return result


def test_every_hand_gets_each_users_share_to_within_one_job_in_consecutive_slices():
    by_user = jobs_of(u1=10, u2=7, u3=2)
    hands = deal(by_user, 4, {})

    for user, jobs in by_user.items():
        sizes = [len(hand.get(user, [])) for hand in hands]
        assert max(sizes) - min(sizes) <= 1, (user, sizes)
        slices = [hand[user] for hand in hands if user in hand]
        assert sorted((job for s in slices for job in s), key=jobs.index) == jobs
        for part in slices:  # consecutive: neighbours in the table go to one executor
            first = jobs.index(part[0])
            assert part == jobs[first : first + len(part)]
    round_sizes = [sum(len(v) for v in hand.values()) for hand in hands]
    assert max(round_sizes) - min(round_sizes) <= len(by_user), round_sizes


def test_users_new_to_the_shard_start_at_their_ids_hand_and_go_on_from_their_last():
    next_hand: dict[int, int] = {}
    hands = deal(jobs_of(u1=1, u2=1, u3=1, u4=1), 2, next_hand)
    assert [sorted(hand) for hand in hands] == [[2, 4], [1, 3]]

    hands = deal(jobs_of(u1=1, u2=1, u3=1, u4=1), 2, next_hand)
    assert [sorted(hand) for hand in hands] == [[1, 3], [2, 4]]


@pytest.mark.parametrize("executors", [2, 3, 4])
def test_over_rounds_every_executor_gets_each_users_share_of_its_jobs_to_within_one(executors):
    """Executors take the partitions round-robin (partition i is the (i mod N)-th's), and
    each starts the jobs it holds fairly among the users it holds: a user with more jobs
    in one executor runs dry in the other and falls behind (partition_deal's docstring).
    A thousand users, a few jobs each a round, odd and even counts."""
    dealer = PartitionDealer(first_partition=5)
    per_executor: dict[int, Counter[int]] = defaultdict(Counter)
    for round_ in range(300):
        users = range(round_ % 7, 1000, 1 + round_ % 3)  # not every user in every round
        by_user = jobs_of(**{f"u{user}": 1 + (user + round_) % 5 for user in users})
        ordered, partitions = dealer.in_send_order(by_user, {}, 12)
        for job, partition in zip(ordered, partitions, strict=True):
            per_executor[job.user_id][partition % executors] += 1

    spreads = [max(c.values()) - min(c[e] for e in range(executors)) for c in per_executor.values()]
    assert max(spreads) <= 1


def test_a_round_goes_to_the_partitions_after_the_last_rounds():
    dealer = PartitionDealer(first_partition=10)
    by_user = jobs_of(u1=2 * MESSAGES_PER_PARTITION, u2=MESSAGES_PER_PARTITION)
    _, first = dealer.in_send_order(by_user, {}, 12)
    _, second = dealer.in_send_order(jobs_of(u1=1), {}, 12)

    assert sorted(set(first)) == [0, 10, 11]
    assert second == [1]


@pytest.mark.parametrize(
    ("messages", "expected"),
    [(1, 1), (MESSAGES_PER_PARTITION, 1), (MESSAGES_PER_PARTITION + 1, 2), (10_000, 12)],
)
def test_a_round_goes_to_one_partition_per_few_messages_up_to_all(messages, expected):
    picked = pick_partitions(12, messages, first=7)
    assert len(picked) == len(set(picked)) == expected
    assert set(picked) <= set(range(12))


def test_while_the_partitions_are_unknown_each_message_goes_to_its_keys():
    by_user = jobs_of(u1=3, u2=3)
    assert pick_partitions(None, 6) is None
    ordered, partitions = in_send_order(by_user, {1: 1.0, 2: 1.0}, None, {})
    assert partitions is None
    assert sorted(job.job_id for job in ordered) == sorted(
        job.job_id for jobs in by_user.values() for job in jobs
    )


def test_each_partitions_jobs_are_sent_together_in_fair_order():
    by_user = jobs_of(u1=40, u2=40)
    ordered, partitions = in_send_order(by_user, {1: 1.0, 2: 3.0}, [5, 2], {})

    assert len(ordered) == len(partitions) == 80
    assert partitions == [5] * 40 + [2] * 40  # one run per partition
    first_hand = [job.user_id for job in ordered[:40]]
    assert first_hand[:4].count(2) == 3  # weight 3 against 1: three of every four first
