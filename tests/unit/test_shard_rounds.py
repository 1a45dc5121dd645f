"""A shard's dispatch rounds (ShardRounds) with an in-memory shard, producer and weights.

The rounds supply: each user with jobs due may have its weighted share of the shard's
in-flight limit published and unfinished, and a user with nothing in flight has room at
once. The order jobs start in is the executors' (tests/unit/test_start_order.py).
"""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Iterable

import pytest
from django.utils import timezone

from scheduler_worker.dispatch_config import DispatchConfig
from scheduler_worker.in_flight import RECOUNT_INTERVAL
from scheduler_worker.partition_deal import PartitionDealer
from scheduler_worker.shard_rounds import ShardRounds, round_quotas
from scheduler_worker.shard_store import ClaimedJob
from scheduler_worker.weights import weight_of

SHARD = 7
FLOOD = 10**9


class InMemoryShard:
    """The part of ShardStore a dispatch round uses: each user's due jobs and those in
    flight (claimed, not finished)."""

    shard_id = SHARD

    def __init__(self) -> None:
        self.due: dict[int, int] = defaultdict(int)
        self.claimed: Counter[int] = Counter()
        self.flying: Counter[int] = Counter()
        self._ids = itertools.count()

    def add(self, user: int, jobs: int) -> None:
        self.due[user] += jobs

    def due_users(self, *, ahead: float = 0.0) -> list[int]:
        return sorted(user for user, jobs in self.due.items() if jobs > 0)

    def claim(self, *, epoch, quotas, queued_timeout, ahead=0.0) -> list[ClaimedJob]:
        now = timezone.now()
        batch = []
        for user, quota in quotas.items():
            taken = min(quota, self.due[user])
            self.due[user] -= taken
            self.claimed[user] += taken
            self.flying[user] += taken
            batch += [ClaimedJob(f"job-{next(self._ids)}", user, 0, now, now)] * taken
        return batch

    def in_flight_by_user(self) -> dict[int, int]:
        return {user: count for user, count in self.flying.items() if count}

    def finish(self, user: int, jobs: int | None = None) -> None:
        """Executors ran ``jobs`` (default: all) of the user's jobs in flight."""
        self.flying[user] -= self.flying[user] if jobs is None else jobs

    def release(self, *, epoch, job_ids) -> int:
        return 0


class RecordingProducer:
    """A broker that takes every message at once; it records each message's partition."""

    def __init__(self, partitions: int | None = None) -> None:
        self.partitions = partitions
        self.sent: list[tuple[int, int | None]] = []  # (user, partition) per message

    def send(self, topic, messages, *, on_done, timeout, partitions=None) -> None:
        users = [json.loads(value)["user_id"] for _, value in messages]
        self.sent += list(zip(users, partitions or [None] * len(users), strict=True))
        on_done([])

    def partition_count(self, topic) -> int | None:
        return self.partitions


class FixedWeights:
    def __init__(self, weights: dict[int, float]) -> None:
        self.weights = weights

    def weights_for(self, user_ids: Iterable[int]) -> dict[int, float]:
        return {user: self.weights.get(user, 1.0) for user in user_ids}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def recount(self) -> None:
        """Let the in-flight count be read again at the next round."""
        self.now += RECOUNT_INTERVAL


def rounds_of(shard, weights=None, *, max_in_flight=700, producer=None, clock=None):
    rounds = ShardRounds(
        store=shard,
        producer=producer or RecordingProducer(),
        config=DispatchConfig(
            topic="jobs",
            dead_letter_topic="dead",
            max_in_flight=max_in_flight,
            poll_interval=0.01,
            queued_timeout=60.0,
            sweep_interval=1.0,
            publish_timeout=1.0,
        ),
        clock=clock or Clock(),
        weights=FixedWeights(weights or {}),
    )
    rounds.epoch = 1
    return rounds


def test_each_backlogged_user_gets_its_weighted_share_of_the_limit_in_flight():
    shard = InMemoryShard()
    weights = {1: 1.0, 2: 2.0, 3: 4.0}
    for user in weights:
        shard.add(user, FLOOD)
    rounds = rounds_of(shard, weights, max_in_flight=700)

    assert rounds.dispatch_round() == 700
    assert dict(shard.flying) == {1: 100, 2: 200, 3: 400}
    assert rounds.dispatch_round() == 0  # full: nothing more until executors run some


def test_what_executors_finished_is_refilled_by_weight_at_the_next_count():
    shard, clock = InMemoryShard(), Clock()
    weights = {1: 1.0, 2: 3.0}
    for user in weights:
        shard.add(user, FLOOD)
    rounds = rounds_of(shard, weights, max_in_flight=400, clock=clock)
    rounds.dispatch_round()
    shard.finish(1, 50)
    shard.finish(2, 150)  # started in proportion to the weights

    assert rounds.dispatch_round() == 0  # not counted yet: the limit is never passed
    clock.recount()
    assert rounds.dispatch_round() == 200
    assert dict(shard.flying) == {1: 100, 2: 300}


def test_a_newcomer_beside_a_flood_at_the_limit_has_room_at_once():
    shard = InMemoryShard()
    shard.add(1, FLOOD)
    rounds = rounds_of(shard, max_in_flight=1000)
    rounds.dispatch_round()
    assert shard.flying[1] == 1000

    shard.add(2, 3)  # a light user's jobs come due
    assert rounds.dispatch_round() == 3
    assert shard.flying[2] == 3


def test_room_a_user_leaves_unused_goes_to_those_who_filled_theirs_up_to_the_limit():
    shard = InMemoryShard()
    shard.add(1, FLOOD)
    shard.add(2, 40)  # a steady user: few jobs due at a time
    shard.add(3, FLOOD)
    rounds = rounds_of(shard, {1: 1.0, 2: 1.0, 3: 2.0}, max_in_flight=1000)

    assert rounds.dispatch_round() == 1000  # the limit, not 250 + 40 + 500
    assert shard.flying[2] == 40
    assert shard.flying[3] == pytest.approx(2 * shard.flying[1], abs=2)


def test_a_user_over_its_share_gets_nothing_until_it_is_below_it():
    shard, clock = InMemoryShard(), Clock()
    shard.add(1, FLOOD)
    rounds = rounds_of(shard, max_in_flight=1000, clock=clock)
    rounds.dispatch_round()
    shard.add(2, FLOOD)
    rounds.dispatch_round()  # user 2 gets its half; user 1 holds its whole flood still
    shard.finish(1, 300)
    clock.recount()

    rounds.dispatch_round()
    assert shard.flying[1] == 700  # above its share of 500: no more for now
    shard.finish(1, 300)
    clock.recount()
    rounds.dispatch_round()
    assert shard.flying[1] == 500


def test_with_a_thousand_users_due_each_has_at_least_one_job_in_flight():
    shard = InMemoryShard()
    for user in range(1000):
        shard.add(user, FLOOD)
    rounds = rounds_of(shard, max_in_flight=700)

    rounds.dispatch_round()
    assert set(shard.flying.values()) == {1}


def test_a_paused_shard_claims_nothing_until_resumed():
    shard = InMemoryShard()
    shard.add(1, 10)
    rounds = rounds_of(shard)
    rounds.pause()
    assert rounds.dispatch_round() == 0
    rounds.resume()
    assert rounds.dispatch_round() == 10


def test_a_round_claims_at_most_its_maximum_shared_by_the_rooms():
    assert round_quotas({1: 100, 2: 0, 3: 300}, 1000) == {1: 100, 3: 300}
    assert round_quotas({1: 10_000, 2: 30_000}, 4000) == {1: 1000, 2: 3000}


@pytest.mark.parametrize("weight", [0.0, -1.0, float("inf"), float("nan")])
def test_a_weight_that_is_not_a_positive_finite_number_counts_as_the_default(weight):
    assert weight_of({1: weight}, 1) == weight_of({}, 1)


def test_every_user_s_jobs_are_dealt_evenly_over_the_partitions_across_rounds():
    dealer = PartitionDealer()
    now = timezone.now()
    per_partition: Counter[tuple[int, int]] = Counter()
    for round_size in (1, 3, 5, 7, 2, 11, 4, 1, 6):
        jobs = [
            ClaimedJob(f"{user}-{i}", user, 0, now, now)
            for user in (1, 2)
            for i in range(round_size)
        ]
        ordered, partitions = dealer.deal(jobs, 4)
        assert sorted(ordered, key=lambda job: job.job_id) == sorted(jobs, key=lambda j: j.job_id)
        per_partition.update((job.user_id, p) for job, p in zip(ordered, partitions, strict=True))
    for user in (1, 2):
        counts = [per_partition[user, partition] for partition in range(4)]
        assert max(counts) - min(counts) <= 1, counts


def test_without_known_partitions_each_job_goes_to_its_key_s():
    now = timezone.now()
    jobs = [ClaimedJob("a", 1, 0, now, now)]
    assert PartitionDealer().deal(jobs, None) == (jobs, None)
