"""A failing shard or topic is tried again after a delay that doubles, up to a cap."""

from __future__ import annotations

import pytest

from executor_worker.shard_backoff import ShardBackoff
from tests.fake_clock import FakeClock


def test_a_key_that_never_failed_is_open():
    assert ShardBackoff(first_delay=0.1, max_delay=5, clock=FakeClock(100.0)).is_open(3)


def test_a_failed_key_is_closed_for_its_delay_then_open_again():
    clock = FakeClock(100.0)
    gate = ShardBackoff(first_delay=0.5, max_delay=5, clock=clock)

    assert gate.failed(1) == 0.5
    assert not gate.is_open(1)
    assert gate.is_open(2)  # other keys are not held up
    clock.now += 0.5
    assert gate.is_open(1)


def test_a_failed_key_does_not_answer_until_a_success_whatever_its_delay():
    clock = FakeClock(100.0)
    gate = ShardBackoff(first_delay=0.5, max_delay=5, clock=clock)
    gate.failed(1)
    clock.now += 10

    assert gate.is_open(1) and not gate.answering(1)  # may be tried, by a prober
    assert gate.answering(2)
    gate.succeeded(1)
    assert gate.answering(1)


def test_failures_in_a_row_double_the_delay_up_to_the_cap():
    gate = ShardBackoff(first_delay=0.5, max_delay=3, clock=FakeClock(100.0))

    assert [gate.failed("dlq") for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_a_success_resets_the_delay():
    clock = FakeClock(100.0)
    gate = ShardBackoff(first_delay=0.5, max_delay=5, clock=clock)
    gate.failed(1)
    gate.failed(1)

    gate.succeeded(1)

    assert gate.is_open(1)
    assert gate.failed(1) == 0.5


def test_many_failures_do_not_overflow():
    gate = ShardBackoff(first_delay=0.1, max_delay=5, clock=FakeClock(100.0))
    for _ in range(2000):
        delay = gate.failed(0)
    assert delay == 5


@pytest.mark.parametrize(("first", "cap"), [(0, 1), (2, 1), (-1, 1)])
def test_delays_must_be_positive_and_ordered(first, cap):
    with pytest.raises(ValueError):
        ShardBackoff(first_delay=first, max_delay=cap)


def test_failing_for_counts_from_the_first_failure_in_a_row():
    clock = FakeClock(100.0)
    gate = ShardBackoff(first_delay=0.5, max_delay=3, clock=clock)
    gate.failed(1)
    clock.now += 4
    gate.failed(1)
    gate.failed(2)
    clock.now += 1

    assert gate.failing_for() == {1: 5.0, 2: 1.0}
    gate.succeeded(1)
    assert gate.failing_for() == {2: 1.0}


def test_reached_keys_succeeded_lately_and_have_not_failed_since():
    clock = FakeClock(100.0)
    gate = ShardBackoff(first_delay=0.5, max_delay=3, clock=clock)
    gate.succeeded(1)
    gate.succeeded(2)
    gate.failed(2)
    clock.now += 2.0
    gate.succeeded(3)

    assert gate.reached(within=3.0) == {1, 3}
    assert gate.reached(within=1.0) == {3}


def test_an_attempt_that_hung_until_it_failed_counts_as_failing_from_its_start():
    clock = FakeClock(100.0)
    gate = ShardBackoff(first_delay=0.2, max_delay=5, clock=clock)
    started = clock.now
    clock.now += 3.0  # a claim on a cut connection, failed by the TCP timeout

    gate.failed(3, started_at=started)

    assert gate.failing_for() == {3: 3.0}
    clock.now += 1.0
    gate.failed(3, started_at=clock.now - 0.5)  # later failures keep the first start
    assert gate.failing_for() == {3: 4.0}
