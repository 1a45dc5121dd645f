"""The executor's read-ahead buffer starts held jobs in weighted fair order across users."""

from __future__ import annotations

from collections import Counter

import pytest

from executor_worker.fair_buffer import FairBuffer


def filled(backlogs: dict[str, tuple[float, int]]) -> FairBuffer[tuple[str, int]]:
    buffer: FairBuffer[tuple[str, int]] = FairBuffer()
    for user, (weight, count) in backlogs.items():
        for index in range(count):
            buffer.put(user, weight, (user, index))
    return buffer


def test_every_prefix_follows_the_weights_while_all_are_backlogged():
    buffer = filled({"light": (1.0, 1000), "middle": (2.0, 1000), "heavy": (4.0, 1000)})
    taken: Counter[str] = Counter()
    for _ in range(100):  # batches of 7: each is exactly 1:2:4
        batch = buffer.take(7)
        taken.update(user for user, _ in batch)
        assert Counter(user for user, _ in batch) == {"light": 1, "middle": 2, "heavy": 4}
    assert taken == {"light": 100, "middle": 200, "heavy": 400}


def test_a_users_jobs_from_one_shard_keep_their_order():
    buffer = filled({"a": (1.0, 50), "b": (3.0, 50)})
    taken = buffer.take(100)
    for user in ("a", "b"):
        assert [index for who, index in taken if who == user] == list(range(50))
    assert len(buffer) == 0 and buffer.users() == 0


def test_each_shards_part_of_a_take_carries_every_users_share():
    # A scheduler's round publishes a user's jobs together, so they arrive shard by shard
    # in bursts; the executor claims a take's jobs one shard at a time, so a user whose
    # jobs in a take were all on one shard would start all of them early or late in it.
    buffer: FairBuffer[tuple[str, int, int]] = FairBuffer()
    for user, shards in (("a", (0, 1)), ("b", (1, 0))):
        for shard in shards:
            for index in range(100):
                buffer.put(user, 1.0, (user, shard, index), lane=shard)
    taken = buffer.take(40)
    per_shard = Counter((shard, user) for user, shard, _ in taken)
    assert per_shard == {(0, "a"): 10, (0, "b"): 10, (1, "a"): 10, (1, "b"): 10}
    for user in ("a", "b"):  # in arrival order within a shard
        for shard in (0, 1):
            mine = [index for who, on, index in taken if (who, on) == (user, shard)]
            assert mine == list(range(10))


def test_a_shard_a_user_had_nothing_from_joins_its_turns_from_there_on():
    buffer: FairBuffer[tuple[int, int]] = FairBuffer()
    for index in range(100):
        buffer.put("a", 1.0, (0, index), lane=0)
    assert buffer.take(50) == [(0, index) for index in range(50)]
    for index in range(3):
        buffer.put("a", 1.0, (1, index), lane=1)
    # in turn with shard 0 from here on: neither behind the 50 left from shard 0 nor all
    # three ahead of them
    assert buffer.take(6) == [(1, 0), (0, 50), (1, 1), (0, 51), (1, 2), (0, 52)]


def test_a_users_urgent_job_overtakes_its_own_backlog_not_the_others():
    buffer = filled({"busy": (1.0, 5000), "other": (1.0, 5000)})
    buffer.put("busy", 1.0, ("busy", "urgent"), priority=9)
    first = buffer.take(2)
    assert ("busy", "urgent") in first  # not behind busy's 5,000
    assert Counter(user for user, _ in first) == {"busy": 1, "other": 1}  # still its share


def test_a_user_arriving_behind_a_flood_goes_next():
    buffer = filled({"flood": (1.0, 10_000)})
    buffer.take(3000)
    buffer.put("light", 1.0, ("light", 0))
    assert ("light", 0) in buffer.take(2)  # not behind the 7,000 flood jobs held


def test_an_idle_user_does_not_return_with_banked_credit():
    buffer = filled({"steady": (1.0, 5000)})
    buffer.take(1000)  # "burst" had nothing held all this time
    for index in range(100):
        buffer.put("burst", 1.0, ("burst", index))
    assert Counter(user for user, _ in buffer.take(20)) == {"steady": 10, "burst": 10}


def test_running_dry_for_a_moment_gains_nothing():
    buffer = filled({"steady": (1.0, 5000)})
    served = Counter()
    for index in range(300):  # "greedy" has one job held at a time, refilled at once
        buffer.put("greedy", 4.0, ("greedy", index))
        served.update(user for user, _ in buffer.take(1))
    # weight 4 against 1: about 4/5 of the starts, never more because its queue emptied
    assert served["greedy"] <= 0.8 * 300 + 1


def test_a_light_share_is_not_starved_by_many_users():
    buffer = filled({f"user-{n}": (1.0, 100) for n in range(1000)})
    first = {user for user, _ in buffer.take(1000)}
    assert len(first) == 1000  # every user started once in the first thousand


@pytest.mark.parametrize("per_window", [3000, 4321, 4750])
def test_a_weight_class_of_many_users_keeps_its_share_in_every_window(per_window):
    # 100 users, 25 of each weight, backlogged together: users of one weight must not be
    # served at the same passes, or their one-job errors add up (25 jobs in a window of a
    # few thousand is a weight-1 class 10 % off its share)
    weights = {f"user-{n}": (1.0, 2.0, 5.0, 10.0)[n % 4] for n in range(100)}
    buffer = filled({user: (weight, 2000) for user, weight in weights.items()})
    share = {weight: 25 * weight / 450 for weight in (1.0, 2.0, 5.0, 10.0)}
    for _ in range(8):
        taken = Counter(weights[user] for user, _ in buffer.take(per_window))
        for weight, expected in share.items():
            assert taken[weight] / per_window == pytest.approx(expected, rel=0.05)


def test_weights_follow_the_latest_message():
    buffer = filled({"a": (1.0, 100), "b": (1.0, 100)})
    buffer.put("a", 3.0, ("a", 100))  # a's weight was raised
    taken = Counter(user for user, _ in buffer.take(40))
    assert abs(taken["a"] - 30) <= 1 and taken["a"] + taken["b"] == 40  # 3:1, within a job


def test_clear_returns_everything_held():
    buffer = filled({"a": (1.0, 3), "b": (2.0, 2)})
    first = buffer.take(1)
    held = buffer.clear()
    assert sorted(first + held) == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]
    assert len(buffer) == 0 and buffer.take(5) == []


@pytest.mark.parametrize("weight", [0.0, -1.0, float("nan")])
def test_a_weight_must_be_positive(weight):
    with pytest.raises(ValueError):
        FairBuffer().put("a", weight, "job")


def test_users_that_run_dry_are_reported_once_with_their_weights_and_runs():
    buffer: FairBuffer[tuple[str, int]] = FairBuffer(report_dry=True)
    for index in range(3):
        buffer.put("backlogged", 4.0, ("backlogged", index))
    buffer.put("single", 1.0, ("single", 0))
    for index in range(4):
        buffer.put("staying", 2.0, ("staying", index))

    buffer.take(7)  # "backlogged" and "single" run dry, "staying" keeps one

    assert buffer.ran_dry() == {"backlogged": (4.0, 3), "single": (1.0, 1)}
    assert buffer.ran_dry() == {}  # forgotten once reported


def test_a_run_counts_from_when_the_user_last_had_nothing_held():
    buffer: FairBuffer[str] = FairBuffer(report_dry=True)
    buffer.put("user", 1.0, "first")
    buffer.put("user", 1.0, "second")
    buffer.take(2)
    assert buffer.ran_dry() == {"user": (1.0, 2)}
    for item in ("a", "b", "c"):
        buffer.put("user", 1.0, item)
    buffer.take(1)
    buffer.take(2)  # three in a row, over two takes
    assert buffer.ran_dry() == {"user": (1.0, 3)}


def test_a_user_is_reported_once_when_down_to_two_turns_of_its_share_and_again_once_dry():
    """Reported before it runs dry, an executor can find a heavy user more jobs in time
    for its next turn (executor_worker.work_stealing)."""
    buffer: FairBuffer[tuple[str, int]] = FairBuffer(report_dry=True, turn=70)
    for user, weight in (("light", 1.0), ("heavy", 6.0)):
        for index in range(1000):
            buffer.put(user, weight, (user, index))
    # A turn of 70 gives "heavy" 60 of them: two turns' worth is 120 held.
    buffer.take(1000 - 120 + 1000 // 6)  # "heavy" is taken down to 120 in this take
    assert buffer.ran_dry() == {"heavy": (6.0, 880)}
    buffer.take(7)
    assert buffer.ran_dry() == {}  # once, while it is not refilled
    held_heavy = len(buffer.items_of("heavy"))
    buffer.take(held_heavy * 7 // 6)
    assert buffer.ran_dry() == {"heavy": (6.0, 1000)}  # and once dry


def test_a_user_running_low_is_reported_again_only_once_refilled_above_the_mark():
    buffer: FairBuffer[str] = FairBuffer(report_dry=True, turn=40)
    for index in range(160):  # alone, two turns' worth is 80
        buffer.put("user", 1.0, f"old {index}")
    buffer.take(80)
    assert buffer.ran_dry() == {"user": (1.0, 80)}
    buffer.put("user", 1.0, "one more")  # 81 held: above the mark
    buffer.take(1)
    assert buffer.ran_dry() == {"user": (1.0, 81)}
    buffer.take(1)
    assert buffer.ran_dry() == {}


def test_running_low_holds_while_a_heavy_user_is_down_to_two_turns_beside_others():
    """The executor takes shorter turns then (ExecutorWorker._claim_batch)."""
    heavy_share = 0.8  # "heavy" has 6/7 of the weights
    buffer: FairBuffer[tuple[str, int]] = FairBuffer(report_dry=True, turn=70)
    for user, weight in (("light", 1.0), ("heavy", 6.0)):
        for index in range(1000):
            buffer.put(user, weight, (user, index))
    # A turn of 70 gives "heavy" 60 of them: two turns' worth is 120 held.
    while len(buffer.items_of("heavy")) > 121:
        buffer.take(1)
    assert not buffer.running_low(min_share=heavy_share)
    while len(buffer.items_of("heavy")) > 120:
        buffer.take(1)
    assert buffer.running_low(min_share=heavy_share)
    assert not buffer.running_low(min_share=0.9)  # a share under 0.9 does not count then
    for index in range(1000, 1010):  # refilled above the mark
        buffer.put("heavy", 6.0, ("heavy", index))
    assert not buffer.running_low(min_share=heavy_share)
    while buffer.items_of("heavy"):
        buffer.take(1)
    assert not buffer.running_low(min_share=0.0)  # "heavy" is gone, "light" holds many


def test_a_user_alone_is_not_running_low_whatever_it_holds():
    """Its last items take turns from nobody: whole turns drain it fastest."""
    buffer: FairBuffer[str] = FairBuffer(report_dry=True, turn=40)
    for index in range(160):  # alone, two turns' worth is 80
        buffer.put("user", 1.0, f"job {index}")
    buffer.take(150)
    assert buffer.ran_dry() == {"user": (1.0, 80)}  # low, for work stealing
    assert not buffer.running_low(min_share=0.0)


def test_a_user_with_few_jobs_in_two_turns_is_reported_only_once_dry():
    """Two turns of 1,000 give each of 100 weight-1 users 20 jobs: too few to look early."""
    buffer: FairBuffer[tuple[str, int]] = FairBuffer(report_dry=True, turn=1000)
    for user in range(100):
        for index in range(50):
            buffer.put(str(user), 1.0, (str(user), index))
    buffer.take(100 * 49)
    assert buffer.ran_dry() == {}  # every user down to 1 held
    buffer.take(100)
    assert buffer.ran_dry() == {str(user): (1.0, 50) for user in range(100)}


def test_the_items_of_a_user_are_those_it_still_holds():
    buffer = filled({"a": (1.0, 3), "b": (2.0, 2)})
    [taken] = buffer.take(1)
    held = {("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)} - {taken}
    for user in ("a", "b"):
        assert sorted(buffer.items_of(user)) == sorted(item for item in held if item[0] == user)
    assert buffer.items_of("nobody") == []


def test_nothing_is_reported_unless_asked_for():
    buffer = filled({"a": (1.0, 500)})
    buffer.take(500)
    assert buffer.ran_dry() == {}


def test_jobs_started_outside_the_buffer_are_charged_to_a_user_holding_items():
    """Two weight-1 users alternate; 3 jobs of ``a`` started elsewhere (the express
    runner) make ``b`` go next 3 times before ``a`` comes back."""
    buffer = filled({"a": (1.0, 10), "b": (1.0, 10)})
    first = [user for user, _ in buffer.take(2)]
    buffer.charge("a", 1.0, 3)
    taken = [user for user, _ in buffer.take(8)]
    assert sorted(first) == ["a", "b"]
    assert taken[:3] == ["b", "b", "b"]
    served = Counter(first + taken) + Counter({"a": 3})  # the charged jobs count as served
    assert abs(served["a"] - served["b"]) <= 1


def test_a_user_charged_while_holding_nothing_comes_in_behind_by_its_charge():
    buffer = filled({"b": (1.0, 10)})
    buffer.charge("a", 2.0, 4)  # 4 jobs at weight 2: two of b's strides
    for index in range(5):
        buffer.put("a", 2.0, ("a", index))
    taken = [user for user, _ in buffer.take(6)]
    assert taken[:2] == ["b", "b"]
    assert taken.count("a") >= 3  # then at twice b's rate


def test_a_charge_needs_a_positive_weight():
    with pytest.raises(ValueError, match="weight must be positive"):
        FairBuffer().charge("a", 0.0, 1)


def test_jobs_taken_that_did_not_start_are_refunded_to_a_user_holding_items():
    """Weights 1:2:4; 40 of the weight-4 user's first 70 jobs taken were started by
    another executor first (work stealing): the next takes give it those turns back, so
    of the jobs that started here it has its 4/7 again."""
    buffer = filled({"light": (1.0, 1000), "middle": (2.0, 1000), "heavy": (4.0, 1000)})
    first = Counter(user for user, _ in buffer.take(70))
    assert first == {"light": 10, "middle": 20, "heavy": 40}
    buffer.refund("heavy", 4.0, 40)
    started = first - Counter({"heavy": 40}) + Counter(user for user, _ in buffer.take(630))
    assert sum(started.values()) == 660
    for user, weight in (("light", 1), ("middle", 2), ("heavy", 4)):
        assert abs(started[user] - 660 * weight / 7) <= 2, started


def test_a_refund_to_a_user_holding_nothing_banks_no_credit():
    buffer = filled({"a": (1.0, 2), "b": (1.0, 100)})
    buffer.take(4)  # a's two, and two of b's
    buffer.refund("a", 1.0, 2)  # a holds nothing: the turns it lost are past
    for index in range(50):
        buffer.put("a", 1.0, ("a", index))
    taken = [user for user, _ in buffer.take(20)]
    assert abs(taken.count("a") - taken.count("b")) <= 1  # alternating, no burst of a's


def test_a_refund_needs_a_positive_weight():
    with pytest.raises(ValueError, match="weight must be positive"):
        FairBuffer().refund("a", -1.0, 1)


def test_a_users_next_items_are_those_take_would_give_it():
    buffer: FairBuffer[tuple[str, int]] = FairBuffer()
    for index in range(40):
        buffer.put("a", 1.0, ("a", index), priority=index % 3, lane=index % 4)
        buffer.put("b", 2.0, ("b", index), lane=index % 2)
    expected = buffer.next_of("a", 15)
    assert [item for item in buffer.take(80) if item[0] == "a"][:15] == expected
    assert buffer.next_of("nobody", 3) == []


def test_items_discarded_take_no_turn():
    # Copies of jobs that started elsewhere, dropped before they are taken: the user's
    # turns go to the jobs it still has.
    buffer = filled({"a": (1.0, 20), "b": (1.0, 20)})
    buffer.discard("a", [item for item in buffer.next_of("a", 20) if item[1] % 2])
    assert len(buffer) == 30
    taken = buffer.take(20)
    assert Counter(user for user, _ in taken) == {"a": 10, "b": 10}
    assert [index for user, index in taken if user == "a"] == list(range(0, 20, 2))


def test_a_user_whose_items_are_all_discarded_runs_dry_and_banks_no_credit():
    buffer: FairBuffer[tuple[str, int]] = FairBuffer(report_dry=True)
    for index in range(10):
        buffer.put("a", 1.0, ("a", index))
    for index in range(100):
        buffer.put("b", 1.0, ("b", index))
    buffer.take(4)  # two each
    buffer.discard("a", buffer.next_of("a", 10))
    assert buffer.users() == 1 and len(buffer) == 98
    assert buffer.ran_dry() == {"a": (1.0, 2)}
    assert [user for user, _ in buffer.take(20)] == ["b"] * 20
    for index in range(50):
        buffer.put("a", 1.0, ("a", 100 + index))
    taken = [user for user, _ in buffer.take(20)]
    assert abs(taken.count("a") - taken.count("b")) <= 1  # alternating, no burst of a's
