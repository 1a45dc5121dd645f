"""Weighted fair share of dispatch slots, and the weighted publish order, without servers."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_worker.fair_share import FairShareAllocator, interleave

FLOOD = 1_000_000  # due jobs of a user who stays backlogged for the whole test
WEIGHTS_1_2_4 = {1: 1.0, 2: 2.0, 3: 4.0}

user_ids = st.integers(min_value=1, max_value=8)
weight_values = st.floats(min_value=0.01, max_value=100.0)
ticks = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=25),
        st.dictionaries(user_ids, st.integers(min_value=0, max_value=30), max_size=8),
    ),
    min_size=1,
    max_size=30,
)


def run_ticks(allocator, *, capacity, demand, weights, count):
    return [
        allocator.allocate(capacity=capacity, demand=demand, weights=weights) for _ in range(count)
    ]


def shares(results, users):
    total = sum(sum(result.values()) for result in results)
    return {user: sum(result.get(user, 0) for result in results) / total for user in users}


def weighted_ideal(weights):
    total = sum(weights.values())
    return {user: weight / total for user, weight in weights.items()}


@pytest.mark.parametrize("capacity", [5, 500])
def test_weights_1_2_4_share_every_10_tick_window_within_5_percent(capacity):
    results = run_ticks(
        FairShareAllocator(),
        capacity=capacity,
        demand=dict.fromkeys(WEIGHTS_1_2_4, FLOOD),
        weights=WEIGHTS_1_2_4,
        count=300,
    )
    ideal = weighted_ideal(WEIGHTS_1_2_4)
    for start in range(len(results) - 10):
        window = shares(results[start : start + 10], WEIGHTS_1_2_4)
        for user, share in window.items():
            assert share == pytest.approx(ideal[user], abs=0.05)


@pytest.mark.parametrize("capacity", [5, 500])
def test_weights_1_2_4_share_the_long_run_within_1_percent(capacity):
    results = run_ticks(
        FairShareAllocator(),
        capacity=capacity,
        demand=dict.fromkeys(WEIGHTS_1_2_4, FLOOD),
        weights=WEIGHTS_1_2_4,
        count=1000,
    )
    ideal = weighted_ideal(WEIGHTS_1_2_4)
    for user, share in shares(results, WEIGHTS_1_2_4).items():
        assert share == pytest.approx(ideal[user], abs=0.01)


def test_a_user_back_from_100_idle_ticks_gets_its_share_and_no_burst():
    allocator = FairShareAllocator()
    weights = {1: 1.0, 2: 1.0}
    run_ticks(allocator, capacity=10, demand={1: FLOOD, 2: 0}, weights=weights, count=100)
    back = run_ticks(allocator, capacity=10, demand={1: FLOOD, 2: FLOOD}, weights=weights, count=20)
    assert back[0][2] <= 5
    for served in range(1, 21):
        assert sum(result[2] for result in back[:served]) <= 5 * served + 1


def test_a_light_user_is_served_on_the_next_tick_behind_a_heavy_flood():
    allocator = FairShareAllocator()
    weights = {1: 100.0, 2: 1.0}
    flooded = run_ticks(allocator, capacity=5, demand={1: FLOOD}, weights=weights, count=50)
    assert all(result == {1: 5} for result in flooded)
    result = allocator.allocate(capacity=5, demand={1: FLOOD, 2: 1}, weights=weights)
    assert result == {1: 4, 2: 1}


def test_every_newcomer_is_served_on_its_first_tick_when_capacity_allows():
    allocator = FairShareAllocator()
    weights = {1: 1000.0}
    run_ticks(allocator, capacity=4, demand={1: FLOOD}, weights=weights, count=10)
    result = allocator.allocate(
        capacity=4, demand={1: FLOOD, 2: 3, 3: 1, 4: FLOOD}, weights=weights
    )
    assert result == {1: 1, 2: 1, 3: 1, 4: 1}


def test_the_first_slot_is_an_advance_on_the_share_not_extra_share():
    allocator = FairShareAllocator()
    weights = {1: 9.0, 2: 1.0}
    results = run_ticks(
        allocator, capacity=2, demand={1: FLOOD, 2: FLOOD}, weights=weights, count=100
    )
    assert results[0] == {1: 1, 2: 1}
    assert sum(result.get(2, 0) for result in results) == 20  # 1/10 of 200 slots


@pytest.mark.parametrize(
    ("weights", "capacity"),
    [
        (dict.fromkeys(range(10), 1.0), 3),
        ({user: float(2 ** (user % 4)) for user in range(12)}, 2),
        (dict.fromkeys(range(50), 1.0), 1),
    ],
)
def test_slots_rotate_when_capacity_is_below_the_number_of_users(weights, capacity):
    results = run_ticks(
        FairShareAllocator(),
        capacity=capacity,
        demand=dict.fromkeys(weights, FLOOD),
        weights=weights,
        count=400,
    )
    total_weight = sum(weights.values())
    for user, weight in weights.items():
        served_at = [tick for tick, result in enumerate(results) if user in result]
        longest_wait = max(b - a for a, b in zip([-1, *served_at], served_at, strict=False))
        assert longest_wait <= 2 * total_weight / (capacity * weight)


def test_equal_users_take_turns_in_id_order_when_there_is_one_slot():
    results = run_ticks(
        FairShareAllocator(),
        capacity=1,
        demand=dict.fromkeys(range(5), FLOOD),
        weights={},
        count=15,
    )
    assert [next(iter(result)) for result in results] == [0, 1, 2, 3, 4] * 3


def test_a_user_never_gets_more_than_its_demand_and_the_rest_is_shared():
    allocator = FairShareAllocator()
    results = run_ticks(
        allocator, capacity=10, demand={1: 1, 2: FLOOD, 3: FLOOD}, weights={}, count=10
    )
    for result in results:
        assert result[1] == 1
        assert sorted([result[2], result[3]]) == [4, 5]
    assert sum(result[2] for result in results) == sum(result[3] for result in results)


def test_capacity_a_demand_limited_user_leaves_is_water_filled_by_weight():
    weights = {1: 1.0, 2: 1.0, 3: 2.0}
    results = run_ticks(
        FairShareAllocator(),
        capacity=12,
        demand={1: 2, 2: FLOOD, 3: FLOOD},
        weights=weights,
        count=30,
    )
    assert all(result[1] == 2 for result in results)
    assert sum(result[2] for result in results) == 100  # 10 slots a tick split 1:2
    assert sum(result[3] for result in results) == 200


def test_capacity_covering_all_demand_serves_everyone_fully():
    result = FairShareAllocator().allocate(
        capacity=100, demand={1: 3, 2: 0, 3: 40}, weights={1: 0.5, 3: 7.0}
    )
    assert result == {1: 3, 3: 40}


def test_zero_capacity_gives_nothing():
    assert FairShareAllocator().allocate(capacity=0, demand={1: 5}, weights={}) == {}


def test_a_weight_change_takes_effect_on_the_next_call():
    allocator = FairShareAllocator()
    demand = {1: FLOOD, 2: FLOOD}
    run_ticks(allocator, capacity=10, demand=demand, weights={1: 1.0, 2: 1.0}, count=20)
    changed = run_ticks(allocator, capacity=10, demand=demand, weights={1: 1.0, 2: 4.0}, count=5)
    assert changed == [{1: 2, 2: 8}] * 5


def test_a_user_missing_from_the_weights_counts_as_weight_1():
    result = FairShareAllocator().allocate(capacity=4, demand={1: FLOOD, 2: FLOOD}, weights={1: 3})
    assert result == {1: 3, 2: 1}


@pytest.mark.parametrize("weight", [0.0, -1.0, math.nan, math.inf])
def test_a_weight_that_is_not_positive_and_finite_is_rejected(weight):
    with pytest.raises(ValueError, match="weight of user 2"):
        FairShareAllocator().allocate(capacity=5, demand={1: 1, 2: 1}, weights={2: weight})
    with pytest.raises(ValueError, match="weight of user 2"):
        interleave({2: ["a"]}, {2: weight})


def test_a_negative_capacity_or_demand_is_rejected():
    with pytest.raises(ValueError, match="capacity"):
        FairShareAllocator().allocate(capacity=-1, demand={1: 1}, weights={})
    with pytest.raises(ValueError, match="demand of user 1"):
        FairShareAllocator().allocate(capacity=1, demand={1: -1}, weights={})


@given(ticks=ticks, weights=st.dictionaries(user_ids, weight_values, max_size=8))
def test_every_tick_fills_what_it_can_within_each_users_demand(ticks, weights):
    allocator = FairShareAllocator()
    active_before: set[int] = set()
    for capacity, demand in ticks:
        result = allocator.allocate(capacity=capacity, demand=demand, weights=weights)
        active = {user for user, due in demand.items() if due > 0}
        assert sum(result.values()) == min(capacity, sum(demand.values()))
        assert set(result) <= active
        assert all(0 < slots <= demand[user] for user, slots in result.items())
        if capacity >= len(active):
            assert active - active_before <= set(result), "a newcomer missed its first slot"
        active_before = active


@given(ticks=ticks, weights=st.dictionaries(user_ids, weight_values, max_size=8), seed=st.randoms())
def test_the_same_calls_give_the_same_slots_whatever_the_mapping_order(ticks, weights, seed):
    def shuffled(mapping):
        items = list(mapping.items())
        seed.shuffle(items)
        return dict(items)

    plain, shuffling = FairShareAllocator(), FairShareAllocator()
    for capacity, demand in ticks:
        expected = plain.allocate(capacity=capacity, demand=demand, weights=weights)
        got = shuffling.allocate(
            capacity=capacity, demand=shuffled(demand), weights=shuffled(weights)
        )
        assert got == expected


@settings(max_examples=50)
@given(
    weights=st.dictionaries(user_ids, weight_values, min_size=1, max_size=8),
    capacities=st.lists(st.integers(min_value=0, max_value=25), min_size=1, max_size=100),
)
def test_backlogged_users_stay_within_a_bounded_lag_of_their_weighted_share(weights, capacities):
    allocator = FairShareAllocator()
    demand = dict.fromkeys(weights, FLOOD)
    share = weighted_ideal(weights)
    served = dict.fromkeys(weights, 0)
    capacity_so_far = 0
    for capacity in capacities:
        result = allocator.allocate(capacity=capacity, demand=demand, weights=weights)
        capacity_so_far += capacity
        for user in weights:
            served[user] += result.get(user, 0)
            lag = capacity_so_far * share[user] - served[user]
            assert -1 - 1e-6 <= lag <= len(weights) - 1 + 1e-6


batches = st.dictionaries(user_ids, st.integers(min_value=0, max_value=40), max_size=6).map(
    lambda sizes: {user: [(user, k) for k in range(size)] for user, size in sizes.items()}
)


@given(batches=batches, weights=st.dictionaries(user_ids, weight_values, max_size=8))
def test_interleave_keeps_every_job_and_each_users_order(batches, weights):
    order = interleave(batches, weights)
    assert sorted(order) == sorted(job for batch in batches.values() for job in batch)
    for user, batch in batches.items():
        assert [job for job in order if job[0] == user] == batch


@given(
    weights=st.dictionaries(user_ids, weight_values, min_size=1, max_size=6),
    size=st.integers(min_value=1, max_value=60),
)
def test_interleave_mixes_users_in_proportion_to_weight_in_every_prefix(weights, size):
    order = interleave({user: [user] * size for user in weights}, weights)
    share = weighted_ideal(weights)
    counts = dict.fromkeys(weights, 0)
    for length, user in enumerate(order, start=1):
        counts[user] += 1
        if counts[user] == size:
            break  # from here on the order can no longer include this user
        for other, count in counts.items():
            assert abs(count - length * share[other]) <= 1 + 1e-6


def test_interleave_spreads_a_1_2_4_split_evenly():
    order = interleave({1: ["a"] * 2, 2: ["b"] * 4, 3: ["c"] * 8}, WEIGHTS_1_2_4)
    assert "".join(order) == "cbcacbc" * 2  # every 7 jobs: 4 of c, 2 of b, 1 of a


def test_interleave_lets_the_others_finish_after_a_user_runs_out():
    order = interleave({1: ["a"], 2: ["b"] * 3}, {1: 5.0, 2: 1.0})
    assert order == ["a", "b", "b", "b"]


def test_interleave_of_nothing_is_empty():
    assert interleave({}, {}) == []
    assert interleave({1: []}, {}) == []


def test_allocate_then_interleave_round_trip_keeps_quotas():
    rng = random.Random(7)
    allocator = FairShareAllocator()
    demand = {user: rng.randint(0, 50) for user in range(1, 9)}
    weights = {user: rng.choice([0.5, 1.0, 2.0, 4.0]) for user in demand}
    quotas = allocator.allocate(capacity=60, demand=demand, weights=weights)
    order = interleave({user: [user] * n for user, n in quotas.items()}, weights)
    assert len(order) == 60
    assert {user: order.count(user) for user in quotas} == quotas
