"""The start order: held jobs start in weighted fair order across users (stride scheduling),
each user's by priority, then its shards in turns; inline and thread jobs are two queues;
an unreachable shard's jobs are set aside until it answers."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest

from executor_worker.start_order import SOURCE_TURN, FairQueue, StartOrder


def filled(backlogs: dict[str, tuple[float, int]]) -> FairQueue[tuple[str, int]]:
    queue: FairQueue[tuple[str, int]] = FairQueue()
    for user, (weight, count) in backlogs.items():
        for index in range(count):
            queue.put(user, weight, (user, index))
    return queue


def test_every_prefix_follows_the_weights_while_all_are_backlogged():
    queue = filled({"light": (1.0, 1000), "middle": (2.0, 1000), "heavy": (4.0, 1000)})
    taken: Counter[str] = Counter()
    for _ in range(100):  # batches of 7: each within a job of 1:2:4
        batch = Counter(user for user, _ in queue.take(7))
        taken.update(batch)
        for user, share in (("light", 1), ("middle", 2), ("heavy", 4)):
            assert abs(batch[user] - share) <= 1
    assert taken == {"light": 100, "middle": 200, "heavy": 400}


def test_a_users_jobs_keep_their_order():
    queue = filled({"a": (1.0, 50), "b": (3.0, 50)})
    taken = queue.take(100)
    for user in ("a", "b"):
        assert [index for who, index in taken if who == user] == list(range(50))
    assert len(queue) == 0


def test_a_users_shards_take_turns_each_in_its_own_arrival_order():
    queue: FairQueue[tuple[int, int]] = FairQueue(source_turn=4)
    for shard in (0, 1):  # shard 0's jobs all arrived first
        for index in range(12):
            queue.put("a", 1.0, (shard, index), source=shard)
    taken = queue.take(24)
    assert [shard for shard, _ in taken] == ([0] * 4 + [1] * 4) * 3
    for shard in (0, 1):
        assert [index for who, index in taken if who == shard] == list(range(12))


def test_a_shard_that_had_nothing_held_joins_the_turn_being_taken():
    queue: FairQueue[tuple[int, int]] = FairQueue(source_turn=4)
    for index in range(40):
        queue.put("a", 1.0, (0, index), source=0)
    queue.take(18)  # in the middle of shard 0's fifth turn: it banked nothing for shard 1
    for index in range(10):
        queue.put("a", 1.0, (1, index), source=1)
    assert [shard for shard, _ in queue.take(12)] == [0, 0] + [1] * 4 + [0] * 4 + [1] * 2


def test_a_shard_set_aside_and_back_goes_on_behind_what_it_kept():
    queue: FairQueue[tuple[int, int]] = FairQueue(source_turn=2)
    for index in range(6):
        for shard in (0, 1):
            queue.put("a", 1.0, (shard, index), source=shard)
    removed = queue.remove(lambda job: job[0] == 0 or job[1] < 2)  # shard 1 keeps 2 jobs
    assert sorted(removed) == [(1, index) for index in range(2, 6)]
    for job in removed:
        queue.put("a", 1.0, job, source=1)
    taken = queue.take(12)
    assert [index for shard, index in taken if shard == 1] == list(range(6))


def test_a_users_urgent_job_overtakes_its_own_backlog_not_the_others():
    queue = filled({"busy": (1.0, 5000), "other": (1.0, 5000)})
    queue.put("busy", 1.0, ("busy", "urgent"), priority=9)
    first = queue.take(2)
    assert ("busy", "urgent") in first  # not behind busy's 5,000
    assert Counter(user for user, _ in first) == {"busy": 1, "other": 1}  # still its share


def test_a_user_arriving_behind_a_flood_goes_next():
    queue = filled({"flood": (1.0, 10_000)})
    queue.take(3000)
    queue.put("light", 1.0, ("light", 0))
    assert ("light", 0) in queue.take(2)  # not behind the 7,000 flood jobs held


def test_an_idle_user_does_not_return_with_banked_credit():
    queue = filled({"steady": (1.0, 5000)})
    queue.take(1000)  # "burst" had nothing held all this time
    for index in range(100):
        queue.put("burst", 1.0, ("burst", index))
    taken = Counter(user for user, _ in queue.take(20))
    assert abs(taken["burst"] - 10) <= 1


def test_running_dry_for_a_moment_gains_nothing():
    queue = filled({"steady": (1.0, 5000)})
    served: Counter[str] = Counter()
    for index in range(300):  # "greedy" has one job held at a time, refilled at once
        queue.put("greedy", 4.0, ("greedy", index))
        served.update(user for user, _ in queue.take(1))
    assert served["greedy"] <= 0.8 * 300 + 1  # never more than its 4/5


def test_a_light_share_is_not_starved_by_many_users():
    queue = filled({f"user-{n}": (1.0, 100) for n in range(1000)})
    assert len({user for user, _ in queue.take(1000)}) == 1000


@pytest.mark.parametrize("per_window", [3000, 4321, 4750])
def test_a_weight_class_of_many_users_keeps_its_share_in_every_window(per_window):
    # 100 users, 25 of each weight, backlogged together: users of one weight must not be
    # served at the same passes, or their one-job errors add up in a window.
    weights = {f"user-{n}": (1.0, 2.0, 5.0, 10.0)[n % 4] for n in range(100)}
    queue = filled({user: (weight, 2000) for user, weight in weights.items()})
    share = {weight: 25 * weight / 450 for weight in (1.0, 2.0, 5.0, 10.0)}
    for _ in range(8):
        taken = Counter(weights[user] for user, _ in queue.take(per_window))
        for weight, expected in share.items():
            assert taken[weight] / per_window == pytest.approx(expected, rel=0.05)


def test_weights_follow_the_latest_job():
    queue = filled({"a": (1.0, 100), "b": (1.0, 100)})
    queue.put("a", 3.0, ("a", 100))  # a's weight was raised
    taken = Counter(user for user, _ in queue.take(40))
    assert abs(taken["a"] - 30) <= 1


@pytest.mark.parametrize("weight", [0.0, -1.0, float("nan")])
def test_a_weight_must_be_positive(weight):
    with pytest.raises(ValueError):
        FairQueue().put("a", weight, "job")


def test_removed_jobs_take_no_turn_and_their_user_keeps_its_pass():
    queue = filled({"a": (1.0, 10), "b": (1.0, 10)})
    removed = queue.remove(lambda job: not (job[0] == "a" and job[1] % 2 == 0))
    assert sorted(removed) == [("a", i) for i in range(0, 10, 2)]
    taken = queue.take(10)
    assert Counter(user for user, _ in taken) == {"a": 5, "b": 5}


@dataclass
class Job:
    user_id: int
    shard_id: int
    inline: bool
    weight: float = 1.0
    priority: int = 0


def test_inline_and_thread_jobs_are_taken_each_up_to_its_own_room():
    order: StartOrder[Job] = StartOrder()
    order.put([Job(1, 0, True) for _ in range(5)] + [Job(1, 0, False) for _ in range(5)])
    taken = order.take(inline=3, threaded=2)
    assert [job.inline for job in taken] == [False, False, True, True, True]
    assert order.waiting() == (2, 3)


def test_a_shards_jobs_are_set_aside_until_it_can_be_tried_and_then_come_back():
    order: StartOrder[Job] = StartOrder()
    order.put([Job(1, shard, True) for shard in (0, 1, 0, 1)])
    order.set_aside_shard(1)
    order.put([Job(2, 1, True)])  # read while the shard is set aside: held apart too
    assert order.waiting() == (2, 0) and order.set_aside() == 3
    assert {job.shard_id for job in order.take(inline=10, threaded=0)} == {0}

    order.restore(lambda shard: False)
    assert order.set_aside() == 3
    order.restore(lambda shard: shard == 1)
    assert order.set_aside() == 0
    assert len(order.take(inline=10, threaded=0)) == 3


def test_inline_jobs_take_turns_by_shard_and_thread_jobs_keep_their_order():
    order: StartOrder[Job] = StartOrder()
    turn = SOURCE_TURN
    for inline in (True, False):  # every job of shard 0 arrived before shard 1's
        order.put([Job(1, 0, inline) for _ in range(2 * turn)])
        order.put([Job(1, 1, inline) for _ in range(2 * turn)])
    inline_shards = [job.shard_id for job in order.take(inline=2 * turn, threaded=0)]
    assert inline_shards == [0] * turn + [1] * turn
    thread_shards = [job.shard_id for job in order.take(inline=0, threaded=3 * turn)]
    assert thread_shards == [0] * (2 * turn) + [1] * turn
