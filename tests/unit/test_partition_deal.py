"""Dealing a user's jobs over the jobs topic's partitions: to those that hold fewest of
them in flight, as water fills, taking turns where they hold the same."""

from __future__ import annotations

from collections import Counter

import pytest

from scheduler_worker.partition_deal import PartitionDealer, water_fill

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("held", "jobs", "first", "given"),
    [
        ([0, 0, 0, 0], 10, 0, [3, 3, 2, 2]),  # as if dealt one by one from `first`
        ([0, 0, 0, 0], 10, 2, [2, 2, 3, 3]),
        ([0, 0, 0, 0], 1, 3, [0, 0, 0, 1]),
        ([5, 0, 0, 0], 3, 0, [0, 1, 1, 1]),  # the lowest are raised first
        ([5, 0, 0, 0], 20, 0, [1, 7, 6, 6]),  # then all of them together
        ([9, 2, 4, 0], 5, 0, [0, 1, 0, 4]),  # 9, 3, 4, 4
        ([3, 3], 0, 1, [0, 0]),
    ],
)
def test_water_fill_levels_the_partitions(held, jobs, first, given):
    assert water_fill(held, jobs, first) == given
    assert sum(given) == jobs


def dealt_by(dealer, owners, held, partitions=4):
    dealt = dealer.deal(
        owners, partitions, lambda user, count: [held[user, p] for p in range(count)]
    )
    held.update(zip(owners, dealt, strict=True))
    return dealt


def test_while_nothing_is_started_every_user_s_jobs_are_even_over_the_partitions():
    dealer, held = PartitionDealer(), Counter()
    for round_size in (1, 3, 5, 7, 2, 11, 4, 1, 6):
        dealt_by(dealer, [1] * round_size + [2] * round_size, held)
    for user in (1, 2):
        counts = [held[user, partition] for partition in range(4)]
        assert max(counts) - min(counts) <= 1, counts


def test_jobs_go_where_fewest_of_the_user_s_are_held():
    held = Counter({(1, 0): 30, (1, 1): 10, (1, 2): 0, (1, 3): 20, (2, 0): 0})
    dealt = dealt_by(PartitionDealer(), [1] * 40, held)
    assert [held[1, partition] for partition in range(4)] == [30, 23, 24, 23]
    assert Counter(dealt) == {1: 13, 2: 24, 3: 3}


def test_each_partition_gets_a_consecutive_slice_of_the_user_s_jobs():
    dealt = dealt_by(PartitionDealer(), [7, 7, 7, 7, 7, 7, 7, 7, 7], Counter())
    assert dealt == [3, 3, 3, 0, 0, 1, 1, 2, 2]  # a new user starts at its id (7 mod 4)


def test_users_picks_may_interleave():
    dealt = dealt_by(PartitionDealer(), [0, 1, 0, 1], Counter())
    assert dealt == [0, 1, 1, 2]


def test_without_known_partitions_each_job_goes_to_its_key_s():
    assert PartitionDealer().deal([1, 2], None, lambda user, count: []) == [None, None]
