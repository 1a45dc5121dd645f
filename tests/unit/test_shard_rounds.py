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
from scheduler_worker.errors import MessagesNotAcknowledged
from scheduler_worker.in_flight import MIN_LIMIT, RECOUNT_INTERVAL
from scheduler_worker.shard_rounds import ShardRounds, in_turns, round_quotas
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
        self.flying_on: Counter[tuple[int, int | None]] = Counter()  # by user and partition
        self._ids = itertools.count()

    def add(self, user: int, jobs: int) -> None:
        self.due[user] += jobs

    def due_users(self, *, ahead: float = 0.0) -> list[int]:
        return sorted(user for user, jobs in self.due.items() if jobs > 0)

    def claim(self, *, epoch, quotas, queued_timeout, ahead=0.0, deal=None) -> list[ClaimedJob]:
        owners = []
        for user, quota in quotas.items():
            taken = min(quota, self.due[user])
            self.due[user] -= taken
            owners += [user] * taken
        partitions = deal(owners) if deal and owners else [None] * len(owners)
        now = timezone.now()
        batch = []
        for user, partition in zip(owners, partitions, strict=True):
            self.claimed[user] += 1
            self.flying_on[user, partition] += 1
            batch.append(
                ClaimedJob(f"job-{next(self._ids)}", user, 0, now, now, partition=partition)
            )
        return batch

    @property
    def flying(self) -> Counter[int]:
        """The user's jobs in flight, on every partition."""
        by_user: Counter[int] = Counter()
        for (user, _), count in self.flying_on.items():
            by_user[user] += count
        return by_user

    def in_flight(self) -> dict[tuple[int, int | None], int]:
        return {key: count for key, count in self.flying_on.items() if count}

    def finish(self, user: int, jobs: int | None = None, *, partition: int | None = None) -> None:
        """Executors ran ``jobs`` (default: all) of the user's jobs in flight, on
        ``partition`` (default: on any)."""
        left = self.flying[user] if jobs is None else jobs
        for key in [key for key in self.flying_on if key[0] == user]:
            if partition is None or key[1] == partition:
                done = min(left, self.flying_on[key])
                self.flying_on[key] -= done
                left -= done

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


def rounds_of(
    shard, weights=None, *, max_in_flight=700, in_flight_seconds=0.0, producer=None, clock=None
):
    rounds = ShardRounds(
        store=shard,
        producer=producer or RecordingProducer(),
        config=DispatchConfig(
            topic="jobs",
            dead_letter_topic="dead",
            max_in_flight=max_in_flight,
            in_flight_seconds=in_flight_seconds,
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


def test_a_round_sends_the_users_jobs_in_weighted_turns():
    # A partition's messages are read in the order sent: user by user, as claimed, the
    # executors would hold the first users' jobs before the last users'.
    shard, producer = InMemoryShard(), RecordingProducer()
    weights = {1: 1.0, 2: 2.0, 3: 4.0}
    for user in weights:
        shard.add(user, FLOOD)
    rounds_of(shard, weights, max_in_flight=700, producer=producer).dispatch_round()
    for end in range(70, 701, 70):
        sent = Counter(user for user, _ in producer.sent[:end])
        assert sent == pytest.approx({1: end / 7, 2: end * 2 / 7, 3: end * 4 / 7}, abs=1)


def test_each_partition_s_messages_are_in_weighted_turns():
    # An executor holds what it has read of each of its partitions, in the order sent. A
    # user's jobs of a round go to the partitions in consecutive slices: in turns over the
    # whole round, each partition would start with one user's slice, and a slow executor
    # would start one user's jobs for a while.
    shard, producer = InMemoryShard(), RecordingProducer(partitions=4)
    weights = {1: 1.0, 2: 2.0, 3: 4.0}
    for user in weights:
        shard.add(user, FLOOD)
    rounds_of(shard, weights, max_in_flight=2800, producer=producer).dispatch_round()
    for partition in range(4):
        users = [user for user, sent_to in producer.sent if sent_to == partition]
        assert len(users) >= 700
        for end in range(70, 701, 70):
            sent = Counter(users[:end])
            assert sent == pytest.approx({1: end / 7, 2: end * 2 / 7, 3: end * 4 / 7}, abs=1)


def test_in_weighted_turns_each_user_s_jobs_keep_their_order():
    jobs = [ClaimedJob(f"{user}-{n}", user, 0, None, None) for user in (1, 2) for n in range(4)]
    ordered = in_turns(jobs, {1: 1.0, 2: 3.0})
    assert [job.job_id for job in ordered if job.user_id == 2] == ["2-0", "2-1", "2-2", "2-3"]
    assert [job.user_id for job in ordered[:4]] == [2, 2, 1, 2]


@pytest.mark.parametrize("weight", [0.0, -1.0, float("inf"), float("nan")])
def test_a_weight_that_is_not_a_positive_finite_number_counts_as_the_default(weight):
    assert weight_of({1: weight}, 1) == weight_of({}, 1)


def flying_after(*phases: tuple[float, int], max_in_flight: int = 2000) -> int:
    """Jobs in flight after rounds at one second of work, through ``phases`` of (seconds,
    jobs the executors finish between counts)."""
    shard, clock = InMemoryShard(), Clock()
    shard.add(1, FLOOD)
    rounds = rounds_of(shard, max_in_flight=max_in_flight, in_flight_seconds=1.0, clock=clock)
    for seconds, finishing_per_count in phases:
        for _ in range(round(seconds / RECOUNT_INTERVAL)):
            rounds.dispatch_round()
            shard.finish(1, finishing_per_count)
            clock.recount()
    rounds.dispatch_round()
    return shard.flying[1]


def test_a_shard_keeps_in_flight_what_its_executors_finish_in_a_second_of_work():
    assert flying_after((6.0, 30)) == pytest.approx(300, rel=0.05)  # 300 jobs/s


def test_a_shard_keeps_at_most_its_maximum_and_at_least_the_minimum_in_flight():
    assert flying_after((6.0, 500)) == 2000
    assert flying_after((60.0, 5)) == MIN_LIMIT  # 50 jobs/s: under the minimum


def test_until_the_finish_rate_is_measured_the_limit_is_the_maximum_shared_by_weight():
    shard = InMemoryShard()
    weights = {user: (1.0, 2.0, 5.0, 10.0)[user % 4] for user in range(100)}
    for user in weights:
        shard.add(user, 100)
    rounds_of(shard, weights, max_in_flight=2000, in_flight_seconds=1.0).dispatch_round()
    per_weight = Counter()
    for user, weight in weights.items():
        per_weight[weight] += shard.flying[user]
    assert per_weight[10.0] / per_weight[1.0] == pytest.approx(10, rel=0.2)


def test_the_jobs_in_flight_follow_a_change_of_the_finish_rate_within_seconds():
    assert flying_after((3.0, 100), (6.0, 20)) == pytest.approx(200, rel=0.05)


def test_a_user_s_jobs_go_to_the_partitions_whose_executors_started_more_of_them():
    shard, clock = InMemoryShard(), Clock()
    producer = RecordingProducer(partitions=2)
    shard.add(1, FLOOD)
    rounds = rounds_of(shard, max_in_flight=100, producer=producer, clock=clock)
    rounds.dispatch_round()
    assert Counter(producer.sent) == {(1, 0): 50, (1, 1): 50}
    shard.finish(1, 40, partition=0)  # partition 0's executor is the faster
    shard.finish(1, 10, partition=1)
    clock.recount()
    producer.sent.clear()
    rounds.dispatch_round()
    # each partition holds 50 again: the faster one got what it started, and more
    assert Counter(producer.sent) == {(1, 0): 40, (1, 1): 10}
    assert shard.in_flight() == {(1, 0): 50, (1, 1): 50}


def test_without_known_partitions_each_job_goes_to_its_key_s():
    shard = InMemoryShard()
    producer = RecordingProducer(partitions=None)
    shard.add(1, 5)
    rounds_of(shard, producer=producer).dispatch_round()
    assert producer.sent == [(1, None)] * 5


class CutOffProducer(RecordingProducer):
    """A broker that fails every message while ``cut``, and takes them otherwise."""

    cut = True

    def send(self, topic, messages, *, on_done, timeout, partitions=None) -> None:
        on_done(list(range(len(messages))) if self.cut else [])


def test_the_broker_refuses_until_it_takes_a_message_again():
    shard = InMemoryShard()
    producer = CutOffProducer()
    shard.add(1, 10)
    rounds = rounds_of(shard, producer=producer)
    assert not rounds.publisher.refused()

    rounds.dispatch_round()
    assert rounds.publisher.refused()  # a round that sent messages is not one that worked
    with pytest.raises(MessagesNotAcknowledged):
        rounds.dispatch_round()  # the failed jobs are due again
    assert rounds.publisher.refused()

    producer.cut = False
    shard.add(2, 10)
    assert rounds.dispatch_round() == 10
    assert not rounds.publisher.refused()
