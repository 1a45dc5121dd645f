"""A shard's jobs in flight per user, as the dispatcher counts them between recounts."""

from __future__ import annotations

import math

from scheduler_worker.in_flight import (
    IN_FLIGHT_RECOUNT_INTERVAL,
    LISTED_IN_FLIGHT,
    ShardInFlight,
)
from scheduler_worker.shard_store import ClaimedJob
from tests.fake_clock import FakeClock


class CountingShard:
    """The counts ``ShardInFlight`` reads: jobs queued or running, per user."""

    shard_id = 3

    def __init__(self, in_flight: dict[int, int]) -> None:
        self.in_flight = in_flight
        self.counts = 0

    def in_flight_by_user(self, *, listed: int = 0) -> dict[int, tuple[int, list[str]]]:
        self.counts += 1
        return {user: (count, []) for user, count in self.in_flight.items()}

    def oldest_queued_age(self) -> float | None:
        return None


def job(user: int) -> ClaimedJob:
    return ClaimedJob(
        job_id=f"{user:027d}", user_id=user, attempts=0, due_at=None, dispatched_at=None
    )


def book(shard: CountingShard, clock: FakeClock, *, max_in_flight: int = 100) -> ShardInFlight:
    return ShardInFlight(store=shard, max_in_flight=max_in_flight, batch_size=50, clock=clock)


def test_jobs_claimed_between_counts_use_up_the_room_until_the_next_count():
    shard, clock = CountingShard({1: 60}), FakeClock()
    in_flight = book(shard, clock)
    assert in_flight.room() == 40
    in_flight.claimed([job(2)] * 30)
    shard.in_flight = {1: 10, 2: 30}  # the executors finished 50 of user 1's meanwhile
    assert in_flight.room() == 10  # not counted again yet: the limit is never passed
    clock.now += IN_FLIGHT_RECOUNT_INTERVAL
    assert in_flight.room() == 60
    assert shard.counts == 2


def test_each_user_has_room_up_to_its_weighted_share_and_at_least_one_job():
    shard, clock = CountingShard({1: 60, 2: 5}), FakeClock()
    in_flight = book(shard, clock)
    in_flight.room()
    rooms = in_flight.rooms([1, 2, 3], {1: 2.0, 2: 1.0, 3: 1.0})
    assert rooms == {1: 50 - 60, 2: 25 - 5, 3: 25}
    assert in_flight.idle(in_flight.counts([1, 2, 3])) == [3]


def test_without_a_limit_nothing_is_counted_and_every_user_may_have_a_batch():
    shard, clock = CountingShard({1: 60}), FakeClock()
    in_flight = book(shard, clock, max_in_flight=0)
    assert in_flight.room() == math.inf
    in_flight.claimed([job(1)] * 10)
    assert in_flight.rooms([1, 2], {1: 1.0, 2: 4.0}) == {1: 50, 2: 50}
    assert shard.counts == 0


class ListingShard(CountingShard):
    """Also lists the jobs of users with few in flight, and says which are still."""

    def __init__(self, in_flight: dict[int, list[str]]) -> None:
        super().__init__({})
        self.jobs = in_flight
        self.lookups: list[list[str]] = []

    def in_flight_by_user(self, *, listed: int = 0) -> dict[int, tuple[int, list[str]]]:
        self.counts += 1
        return {u: (len(ids), ids if len(ids) <= listed else []) for u, ids in self.jobs.items()}

    def still_in_flight(self, job_ids: list[str]) -> set[str]:
        self.lookups.append(sorted(job_ids))
        flying = {job_id for ids in self.jobs.values() for job_id in ids}
        return {job_id for job_id in job_ids if job_id in flying}


def test_users_with_few_jobs_in_flight_are_looked_up_by_id_and_seen_idle_between_counts():
    many = [f"m{i}" for i in range(LISTED_IN_FLIGHT + 1)]
    shard, clock = ListingShard({1: many, 2: ["a"], 3: ["b", "c"]}), FakeClock()
    in_flight = book(shard, clock)
    in_flight.room()
    assert in_flight.counts([1, 2, 3]) == {1: len(many), 2: 1, 3: 2}
    assert shard.lookups == [["a", "b", "c"]]  # not user 1's: too many to list

    shard.jobs = {1: many, 3: ["c"]}  # executors finished a and b; no count since
    assert in_flight.counts([1, 2, 3]) == {1: len(many), 2: 0, 3: 1}
    assert in_flight.room() == 100 - len(many) - 1 - 2  # the room is as counted
    assert shard.counts == 1


def test_a_user_claimed_for_since_the_count_is_looked_up_with_its_new_jobs():
    shard, clock = ListingShard({2: ["a"]}), FakeClock()
    in_flight = book(shard, clock)
    in_flight.room()
    in_flight.claimed([job(2)])
    shard.jobs = {2: [job(2).job_id]}  # a finished, the new one did not
    assert in_flight.counts([2]) == {2: 1}
    shard.jobs = {}
    assert in_flight.counts([2]) == {2: 0}
