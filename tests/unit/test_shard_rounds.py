"""A shard's dispatch rounds (ShardRounds) with an in-memory shard, producer and weights.

These drive the rounds as the dispatch thread does (one ``dispatch_round`` after another),
so they test the fair-share allocator as a round calls it, which the allocator's own
tests cannot: a round that claims in several passes, users who run dry, the gauges.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Iterable

import pytest
from django.utils import timezone
from prometheus_client import REGISTRY

from scheduler_worker.dispatch_config import DispatchConfig
from scheduler_worker.express_lane import EXPRESS_IN_FLIGHT
from scheduler_worker.in_flight import IN_FLIGHT_RECOUNT_INTERVAL
from scheduler_worker.shard_rounds import ShardRounds
from scheduler_worker.shard_store import ClaimedJob

SHARD = 7


class InMemoryShard:
    """The part of ShardStore a dispatch round uses; each user's due jobs, oldest first."""

    shard_id = SHARD

    def __init__(self) -> None:
        self.due: dict[int, int] = defaultdict(int)  # user -> due jobs (FLOOD: endless)
        self.claimed: Counter[int] = Counter()
        self.flying: dict[int, set[str]] = defaultdict(set)  # claimed, not finished yet
        self._ids = itertools.count()

    def add(self, user: int, jobs: int) -> None:
        self.due[user] += jobs

    def due_users(self, *, ahead: float = 0.0) -> list[int]:
        return sorted(user for user, jobs in self.due.items() if jobs > 0)

    def claim(
        self, *, epoch: int, quotas: dict[int, int], queued_timeout: float, ahead: float = 0.0
    ):
        now = timezone.now()
        batch = []
        for user, quota in quotas.items():
            taken = min(quota, self.due[user])
            self.due[user] -= taken
            self.claimed[user] += taken
            jobs = [ClaimedJob(f"job-{next(self._ids)}", user, 0, now, now) for _ in range(taken)]
            self.flying[user].update(job.job_id for job in jobs)
            batch += jobs
        return batch

    def in_flight_by_user(self, *, listed: int = 0) -> dict[int, tuple[int, list[str]]]:
        return {
            user: (len(ids), sorted(ids) if len(ids) <= listed else [])
            for user, ids in self.flying.items()
            if ids
        }

    def still_in_flight(self, job_ids: list[str]) -> set[str]:
        flying = set().union(*self.flying.values())
        return {job_id for job_id in job_ids if job_id in flying}

    def in_flight(self, user: int) -> int:
        return len(self.flying[user])

    def finish(self, user: int) -> int:
        """An executor ran every in-flight job of the user; return how many."""
        finished = len(self.flying[user])
        self.flying[user] = set()
        return finished

    def release(self, *, epoch: int, job_ids: list[str]) -> int:
        return 0

    def close(self) -> None:
        pass


class AcknowledgingProducer:
    """A broker that takes every message at once."""

    def send(self, topic, messages, *, on_done, timeout, partitions=None) -> None:
        on_done([])

    def partition_count(self, topic) -> int | None:
        return None

    def publish(self, topic, messages, *, timeout) -> list[int]:
        return []


class FixedWeights:
    def __init__(self, weights: dict[int, float]) -> None:
        self.weights = weights

    def weights_for(self, user_ids: Iterable[int]) -> dict[int, float]:
        return {user: self.weights.get(user, 1.0) for user in user_ids}


class PartitionedProducer(AcknowledgingProducer):
    """A broker whose topic has ``partitions`` partitions; it records each batch's."""

    def __init__(self, partitions: int | None) -> None:
        self.partitions = partitions
        self.batches: list[list[int] | None] = []  # each message's partition, per batch
        self.users: list[list[int]] = []  # each message's user, per batch

    def send(self, topic, messages, *, on_done, timeout, partitions=None) -> None:
        assert partitions is None or len(partitions) == len(messages)
        self.batches.append(None if partitions is None else list(partitions))
        self.users.append([json.loads(value)["user_id"] for _, value in messages])
        on_done([])

    def partition_count(self, topic) -> int | None:
        return self.partitions


def shard_rounds(
    shard: InMemoryShard,
    weights: dict[int, float],
    *,
    batch_size: int,
    max_in_flight: int = 0,
    producer: AcknowledgingProducer | None = None,
    clock=None,
    express_topic: str = "",
    round_jobs_per_user: int = 0,
):
    """The rounds of ``shard``; its clock moves a second each time it is read, unless
    ``clock`` is given: every round counts the shard's jobs in flight."""
    result = ShardRounds(
        store=shard,
        producer=producer or AcknowledgingProducer(),
        config=DispatchConfig(
            topic="jobs",
            dead_letter_topic="dead",
            batch_size=batch_size,
            max_in_flight=max_in_flight,
            poll_interval=0.01,
            queued_timeout=60.0,
            sweep_interval=5.0,
            publish_timeout=1.0,
            express_topic=express_topic,
            round_jobs_per_user=round_jobs_per_user,
        ),
        clock=clock or itertools.count(step=1.0).__next__,
        weights=FixedWeights(weights),
    )
    result.epoch = 1
    return result


FLOOD = 10**9


def test_users_backlogged_beside_a_demand_limited_heavy_user_all_get_their_share():
    """The replay from the issue: capacity 4, six weight-1 users always backlogged, one
    weight-6 user with one due job per round. The heavy user can use only 1 of its 2 slots
    a round; the spare slot must go round the six, not to the same three every time."""
    shard = InMemoryShard()
    light = range(1, 7)
    for user in light:
        shard.add(user, FLOOD)
    heavy = 7
    rounds = shard_rounds(shard, {heavy: 6.0}, batch_size=4)

    for _ in range(600):
        shard.add(heavy, 1)
        rounds.dispatch_round()

    assert shard.claimed[heavy] == 600  # all it had
    # The other 1,800 slots, evenly: 300 each, give or take the rounding of a tick.
    assert {user: shard.claimed[user] for user in light} == pytest.approx(
        dict.fromkeys(light, 300), abs=2
    )


@pytest.mark.parametrize("batch_size", [3, 7, 100])
def test_weights_1_2_4_hold_over_rounds_whatever_the_capacity(batch_size):
    shard = InMemoryShard()
    weights = {1: 1.0, 2: 2.0, 3: 4.0}
    for user in weights:
        shard.add(user, FLOOD)
    rounds = shard_rounds(shard, weights, batch_size=batch_size)

    for _ in range(700):
        rounds.dispatch_round()

    total = sum(shard.claimed.values())
    assert total == 700 * batch_size
    for user, weight in weights.items():
        assert shard.claimed[user] / total == pytest.approx(weight / 7, abs=0.005)


def test_a_user_that_runs_dry_leaves_its_slots_to_the_others_in_the_same_round():
    shard = InMemoryShard()
    shard.add(1, 1)
    shard.add(2, FLOOD)
    rounds = shard_rounds(shard, {}, batch_size=10)

    assert rounds.dispatch_round() == 10
    assert shard.claimed == {1: 1, 2: 9}


def test_a_user_whose_jobs_start_slowly_cannot_fill_the_shards_in_flight_limit():
    """Executors start held jobs by weight across the whole system, so on one shard the
    jobs of a user that others outweigh elsewhere start slowly. They must not take the
    room of a user whose jobs start at once: that one would run dry while backlogged."""
    shard = InMemoryShard()
    slow, fast = 1, 2
    shard.add(slow, FLOOD)
    shard.add(fast, FLOOD)
    rounds = shard_rounds(shard, {fast: 4.0}, batch_size=50, max_in_flight=100)

    dispatched_to_fast = []
    for _ in range(200):
        before = shard.claimed[fast]
        rounds.dispatch_round()
        dispatched_to_fast.append(shard.claimed[fast] - before)
        shard.finish(fast)  # the slow user's jobs never start in this replay

    assert shard.in_flight(slow) == 20  # its weighted share of the limit: 1/5 of 100
    assert min(dispatched_to_fast[5:]) == 50  # a whole batch every round, for ever


def test_a_user_with_nothing_in_flight_gets_a_job_past_a_full_shards_limit_at_once():
    shard = InMemoryShard()
    shard.add(1, FLOOD)
    rounds = shard_rounds(shard, {}, batch_size=100, max_in_flight=100)
    rounds.dispatch_round()
    assert shard.in_flight(1) == 100

    shard.add(2, 3)  # a light user, due while the shard is full
    shard.add(3, 1)  # and another
    rounds.dispatch_round()
    assert shard.claimed == {1: 100, 2: 1, 3: 1}  # one each, the flood none
    rounds.dispatch_round()
    assert shard.claimed == {1: 100, 2: 1, 3: 1}  # now in flight: they wait for room too

    shard.finish(1)
    shard.finish(2)
    rounds.dispatch_round()
    assert shard.claimed[2] == 3  # its last two, first: it is furthest below its share
    assert shard.in_flight(1) == 100 - 2 - 1  # the flood fills the rest of the limit


def test_between_counts_of_the_jobs_in_flight_the_jobs_claimed_count_against_the_limit():
    # the in-flight jobs are counted at most every IN_FLIGHT_RECOUNT_INTERVAL: rounds in
    # between must not pass the limit, and what executors finished is claimed after
    now = [0.0]
    shard = InMemoryShard()
    shard.add(1, FLOOD)
    rounds = shard_rounds(shard, {}, batch_size=60, max_in_flight=100, clock=lambda: now[0])

    for _ in range(5):
        rounds.dispatch_round()
        now[0] += IN_FLIGHT_RECOUNT_INTERVAL / 10
    assert shard.in_flight(1) == 100

    shard.finish(1)
    rounds.dispatch_round()
    assert shard.claimed[1] == 100  # not counted yet: the limit still looks reached
    now[0] += IN_FLIGHT_RECOUNT_INTERVAL
    rounds.dispatch_round()
    rounds.dispatch_round()
    assert shard.claimed[1] == 200
    assert shard.in_flight(1) == 100


def test_the_share_of_the_limit_orders_users_it_does_not_throttle_a_flood():
    """1,000 users with one due job each beside one flood: the flood's share of the
    in-flight limit is tiny, but the capacity the light users cannot use is still its."""
    shard = InMemoryShard()
    flood = 0
    shard.add(flood, FLOOD)
    for user in range(1, 1001):
        shard.add(user, 1)
    rounds = shard_rounds(shard, {}, batch_size=2000, max_in_flight=5000)

    assert rounds.dispatch_round() == 2000
    assert all(shard.claimed[user] == 1 for user in range(1, 1001))
    assert shard.claimed[flood] == 1000
    assert rounds.dispatch_round() == 2000  # alone now, over its share: still served
    assert shard.claimed[flood] == 3000


def test_with_many_users_due_a_round_gives_each_a_few_jobs_by_weight_not_one():
    """A round costs about as much per user as per job: with a thousand users due, a
    round of the batch size alone gave each one job, and rounds set the drain rate."""
    shard = InMemoryShard()
    weights = {user: 1.0 if user % 2 else 2.0 for user in range(1000)}
    for user in weights:
        shard.add(user, FLOOD)
    rounds = shard_rounds(
        shard, weights, batch_size=1000, max_in_flight=100_000, round_jobs_per_user=4
    )

    assert [rounds.dispatch_round() for _ in range(3)] == [4000] * 3
    assert {shard.claimed[user] for user in weights if weights[user] == 1.0} == {8}
    assert {shard.claimed[user] for user in weights if weights[user] == 2.0} == {16}


def test_a_round_sized_by_its_users_still_keeps_to_the_shards_in_flight_limit():
    shard = InMemoryShard()
    for user in range(1000):
        shard.add(user, FLOOD)
    rounds = shard_rounds(shard, {}, batch_size=1000, max_in_flight=2500, round_jobs_per_user=4)

    assert rounds.dispatch_round() == 2500
    assert rounds.dispatch_round() == 0  # full: the jobs wait in the database


def test_a_round_sized_by_its_users_waits_for_room_for_half_of_it():
    shard = InMemoryShard()
    users = range(1000)
    for user in users:
        shard.add(user, FLOOD)
    rounds = shard_rounds(shard, {}, batch_size=1000, max_in_flight=8000, round_jobs_per_user=4)
    assert rounds.dispatch_round() + rounds.dispatch_round() == 8000  # 8 each: full

    finished = sum(shard.finish(user) for user in range(200))
    assert finished == 1600  # room for less than half a round of 4,000
    before = dict(shard.claimed)
    assert rounds.dispatch_round() == 200  # only the users with none in flight, one each
    assert all(shard.claimed[user] - before[user] == (user < 200) for user in users)

    assert sum(shard.finish(user) for user in range(200, 500)) == 2400
    assert rounds.dispatch_round() == 1600 - 200 + 2400


def gauge(name: str, shard: int, weight_class: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"shard": str(shard), "weight_class": weight_class})


def test_the_backlog_gauges_are_per_shard_and_a_class_no_longer_backlogged_drops_to_0():
    shard = InMemoryShard()
    shard.add(1, 5)
    shard.add(2, 100)
    rounds = shard_rounds(shard, {1: 1.0, 2: 3.0}, batch_size=4)

    rounds.dispatch_round()
    assert gauge("jobsvc_backlogged_users", SHARD, "1") == 1
    assert gauge("jobsvc_dispatched_share_target", SHARD, "3") == pytest.approx(0.75)

    while shard.due[1]:
        rounds.dispatch_round()
    rounds.dispatch_round()  # user 1 has nothing due any more
    assert gauge("jobsvc_backlogged_users", SHARD, "1") == 0
    assert gauge("jobsvc_dispatched_share_target", SHARD, "1") == 0
    assert gauge("jobsvc_dispatched_share_target", SHARD, "3") == pytest.approx(1.0)


def runs(partitions: list[int]) -> list[tuple[int, int]]:
    """(partition, messages) of each run of messages to one partition, in order."""
    return [(p, len(list(run))) for p, run in itertools.groupby(partitions)]


@pytest.mark.parametrize(
    ("batch_size", "expected_runs"),
    [
        (1, [1]),
        (17, [17]),
        (20, [20]),
        (21, [11, 10]),
        (100, [20] * 5),
        (250, [21] * 10 + [20] * 2),
        (1000, [84] * 4 + [83] * 8),
    ],
)
def test_a_round_goes_to_as_few_partitions_as_its_size_needs(batch_size, expected_runs):
    """A small round is one batch for the broker, not one or two messages for each
    partition its jobs' keys hash to; a large one still goes to several partitions (and
    so to several executors), each a different one."""
    shard = InMemoryShard()
    shard.add(1, FLOOD)
    producer = PartitionedProducer(partitions=12)
    rounds = shard_rounds(shard, {}, batch_size=batch_size, producer=producer)

    rounds.dispatch_round()

    [partitions] = producer.batches
    assert sorted(count for _, count in runs(partitions)) == sorted(expected_runs)
    assert len({p for p, _ in runs(partitions)}) == len(expected_runs)
    assert all(0 <= p < 12 for p in partitions)


def test_rounds_spread_over_every_partition():
    shard = InMemoryShard()
    shard.add(1, FLOOD)
    producer = PartitionedProducer(partitions=4)
    rounds = shard_rounds(shard, {}, batch_size=10, producer=producer)

    for _ in range(400):
        rounds.dispatch_round()

    used = Counter(batch[0] for batch in producer.batches)
    assert set(used) == {0, 1, 2, 3}
    assert min(used.values()) > 50  # 100 each on average; random, but not that uneven


def test_a_round_spreads_over_at_most_every_partition_once():
    shard = InMemoryShard()
    shard.add(1, FLOOD)
    producer = PartitionedProducer(partitions=3)
    rounds = shard_rounds(shard, {}, batch_size=1000, producer=producer)

    rounds.dispatch_round()

    [partitions] = producer.batches
    assert sorted(count for _, count in runs(partitions)) == [333, 333, 334]
    assert {p for p, _ in runs(partitions)} == {0, 1, 2}


@pytest.mark.parametrize(
    ("due", "weights"),
    [
        ({1: FLOOD, 2: 100}, {}),  # the fair order ends with 800 of user 1's jobs
        ({1: FLOOD, 2: FLOOD}, {}),  # alternating users: period 2 divides 12 partitions
        ({1: FLOOD, 2: FLOOD, 3: FLOOD}, {1: 1.0, 2: 2.0, 3: 4.0}),
        (dict.fromkeys(range(1, 31), FLOOD), {}),
    ],
)
def test_every_partition_gets_its_share_of_every_users_jobs(due, weights):
    """Executors each read their own partitions and start what they hold in fair order,
    so a user whose jobs went to one executor more than the other runs out there first
    and gets less than its share while still backlogged."""
    shard = InMemoryShard()
    for user, jobs in due.items():
        shard.add(user, jobs)
    producer = PartitionedProducer(partitions=12)
    rounds = shard_rounds(shard, weights, batch_size=1000, producer=producer)

    rounds.dispatch_round()

    [partitions], [users] = producer.batches, producer.users
    assert len(runs(partitions)) == 12, "one run of messages per partition"
    per_partition = Counter(zip(partitions, users, strict=True))
    for user, jobs in Counter(users).items():
        counts = [per_partition[partition, user] for partition in range(12)]
        assert max(counts) - min(counts) <= 1, f"user {user}: {counts}"
        assert sum(counts) == jobs


def test_each_partitions_messages_keep_the_fair_order():
    shard = InMemoryShard()
    shard.add(1, FLOOD)
    shard.add(2, FLOOD)
    producer = PartitionedProducer(partitions=12)
    rounds = shard_rounds(shard, {1: 1.0, 2: 3.0}, batch_size=1000, producer=producer)

    rounds.dispatch_round()

    [partitions], [users] = producer.batches, producer.users
    messages = zip(partitions, users, strict=True)
    for partition, run in itertools.groupby(messages, key=lambda message: message[0]):
        order = [user for _, user in run]
        for prefix in range(1, len(order) + 1):
            # user 1 has a quarter of every prefix, to within one job
            assert abs(order[:prefix].count(1) - prefix / 4) <= 1, f"{partition}: {order}"


def test_while_the_partitions_are_not_known_each_message_goes_to_its_keys_partition():
    shard = InMemoryShard()
    shard.add(1, 25)
    producer = PartitionedProducer(partitions=None)  # no broker, or no such topic yet
    rounds = shard_rounds(shard, {}, batch_size=10, producer=producer)

    for _ in range(3):
        rounds.dispatch_round()

    assert producer.batches == [None, None, None]


class TopicsProducer(AcknowledgingProducer):
    """A broker with the ``topics`` given (name -> partitions); it records each message's
    topic and user, in the order sent."""

    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics
        self.sent: list[tuple[str, int]] = []  # (topic, user) per message

    def send(self, topic, messages, *, on_done, timeout, partitions=None) -> None:
        assert topic in self.topics
        self.sent += [(topic, json.loads(value)["user_id"]) for _, value in messages]
        on_done([])

    def partition_count(self, topic) -> int | None:
        return self.topics.get(topic)

    def users_on(self, topic: str) -> Counter[int]:
        return Counter(user for sent_to, user in self.sent if sent_to == topic)


def express_rounds(shard: InMemoryShard, producer: TopicsProducer, *, max_in_flight: int):
    """Rounds of 100 jobs, with the express topic "jobs.express"."""
    return shard_rounds(
        shard,
        {},
        batch_size=100,
        max_in_flight=max_in_flight,
        producer=producer,
        express_topic="jobs.express",
    )


def test_the_jobs_of_a_user_with_few_in_flight_go_to_the_express_topic():
    shard = InMemoryShard()
    shard.add(1, FLOOD)
    producer = TopicsProducer({"jobs": 4, "jobs.express": 2})
    rounds = express_rounds(shard, producer, max_in_flight=300)
    rounds.dispatch_round()
    # the flood's first few: none in flight yet
    assert producer.users_on("jobs.express") == {1: EXPRESS_IN_FLIGHT}
    assert producer.users_on("jobs") == {1: 100 - EXPRESS_IN_FLIGHT}

    rounds.dispatch_round()  # the flood has jobs in flight now: all to the jobs topic
    assert producer.users_on("jobs.express") == {1: EXPRESS_IN_FLIGHT}
    shard.add(2, EXPRESS_IN_FLIGHT + 2)  # a light user, due during the flood
    rounds.dispatch_round()
    assert producer.users_on("jobs.express")[2] == EXPRESS_IN_FLIGHT
    assert producer.users_on("jobs")[2] == 2  # its others go the usual way

    shard.finish(2)  # no count since: its listed jobs are looked up
    shard.add(2, 1)
    rounds.dispatch_round()
    assert producer.users_on("jobs.express")[2] == EXPRESS_IN_FLIGHT + 1


def test_a_light_user_past_a_full_shards_limit_goes_to_the_express_topic():
    shard = InMemoryShard()
    shard.add(1, FLOOD)
    producer = TopicsProducer({"jobs": 4, "jobs.express": 2})
    rounds = express_rounds(shard, producer, max_in_flight=100)
    rounds.dispatch_round()  # the shard is full
    shard.add(2, 1)
    rounds.dispatch_round()
    assert producer.users_on("jobs.express")[2] == 1
    assert producer.users_on("jobs")[2] == 0


@pytest.mark.parametrize(
    ("express_topic", "topics"),
    [("", {"jobs": 4, "jobs.express": 2}), ("jobs.express", {"jobs": 4})],
    ids=["off", "unknown to the broker"],
)
def test_without_an_express_topic_every_job_goes_to_the_jobs_topic(express_topic, topics):
    shard = InMemoryShard()
    shard.add(1, 10)
    shard.add(2, 1)
    producer = TopicsProducer(topics)
    rounds = shard_rounds(
        shard, {}, batch_size=100, max_in_flight=100, producer=producer, express_topic=express_topic
    )
    assert rounds.dispatch_round() == 11
    assert producer.users_on("jobs") == {1: 10, 2: 1}


def test_a_light_users_job_that_finished_between_counts_does_not_hold_up_its_next():
    """At a full shard's limit, a user's one job in flight finished after the last count:
    its next job goes at the next round, not after the next count."""
    now = [0.0]
    shard = InMemoryShard()
    shard.add(1, FLOOD)
    rounds = shard_rounds(shard, {}, batch_size=100, max_in_flight=100, clock=lambda: now[0])
    rounds.dispatch_round()  # counted, and full
    shard.add(2, 1)
    rounds.dispatch_round()
    assert shard.claimed[2] == 1

    shard.add(2, 1)
    rounds.dispatch_round()
    assert shard.claimed[2] == 1  # its first is still in flight: the second waits

    shard.finish(2)  # no count since: the clock has not moved
    rounds.dispatch_round()
    assert shard.claimed[2] == 2
    assert shard.claimed[1] == 100  # the flood still waits for room


# --- jobs created due now (the due listener's dispatch_express) --------------------------


def test_a_notified_light_users_due_jobs_go_express_at_once_and_count_in_flight():
    shard = InMemoryShard()
    shard.add(1, FLOOD)
    producer = TopicsProducer({"jobs": 4, "jobs.express": 2})
    rounds = express_rounds(shard, producer, max_in_flight=300)
    rounds.dispatch_round()  # the flood has 100 of the shard's 300 in flight
    shard.add(2, EXPRESS_IN_FLIGHT + 3)  # created due now: the API notified
    assert rounds.dispatch_express({2}) == EXPRESS_IN_FLIGHT
    assert producer.users_on("jobs.express")[2] == EXPRESS_IN_FLIGHT
    assert rounds.dispatch_express({2}) == 0  # in flight now: the rest wait their turn
    rounds.dispatch_round()
    assert producer.users_on("jobs.express")[2] == EXPRESS_IN_FLIGHT  # counted, not resent


def test_at_a_full_shards_limit_a_notified_idle_user_gets_one_job_express():
    """As a round gives such a user: the limit is passed by one job per idle user."""
    shard = InMemoryShard()
    shard.add(1, FLOOD)
    producer = TopicsProducer({"jobs": 4, "jobs.express": 2})
    rounds = express_rounds(shard, producer, max_in_flight=100)
    rounds.dispatch_round()  # the flood fills the shard's limit
    shard.add(2, 3)
    assert rounds.dispatch_express({1, 2}) == 1
    assert producer.users_on("jobs.express")[2] == 1
    assert rounds.dispatch_express({2}) == 0  # it has one in flight now


def test_the_room_a_round_holds_is_not_taken_by_the_listener_and_comes_back():
    shard = InMemoryShard()
    shard.add(2, 10)
    producer = TopicsProducer({"jobs": 4, "jobs.express": 2})
    rounds = express_rounds(shard, producer, max_in_flight=6)
    rounds._in_flight.room()  # the limit as the round sees it
    rounds._in_flight.claimed([])
    held = rounds._in_flight.reserve(6)  # a round's claim is running
    shard.add(3, 1)
    assert rounds.dispatch_express({2, 3}) == 2  # no room: one each, as for idle users
    rounds._in_flight.release(held)
    shard.finish(2)
    shard.finish(3)
    assert rounds.dispatch_express({2}) == EXPRESS_IN_FLIGHT


def test_a_notified_user_with_many_in_flight_is_left_to_the_rounds():
    shard = InMemoryShard()
    shard.add(1, FLOOD)
    producer = TopicsProducer({"jobs": 4, "jobs.express": 2})
    rounds = express_rounds(shard, producer, max_in_flight=300)
    rounds.dispatch_round()
    sent = len(producer.sent)
    assert rounds.dispatch_express({1}) == 0
    assert len(producer.sent) == sent


@pytest.mark.parametrize("state", ["no express topic", "paused", "stopped", "no epoch yet"])
def test_no_jobs_go_express_from_a_notification_when_they_must_not(state):
    shard = InMemoryShard()
    shard.add(2, 3)
    producer = TopicsProducer({"jobs": 4, "jobs.express": 2})
    rounds = shard_rounds(
        shard,
        {},
        batch_size=100,
        max_in_flight=100,
        producer=producer,
        express_topic="" if state == "no express topic" else "jobs.express",
    )
    if state == "paused":
        rounds.pause()  # its ZooKeeper session is suspended: it may have lost the shard
    if state == "stopped":
        rounds.stop()  # the shard is going: nothing new leaves it
    if state == "no epoch yet":
        rounds.epoch = None
    assert rounds.dispatch_express({2}) == 0
    assert producer.sent == []
    assert shard.claimed[2] == 0
