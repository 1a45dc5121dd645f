"""When `make run` restarts a worker that exited, and when it gives up (a crash loop)."""

from __future__ import annotations

import pytest

from tests.fake_clock import FakeClock
from tools.devstack.restarts import CrashLoop, Restart, RestartPolicy


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)


def policy(clock: FakeClock, **overrides: float) -> RestartPolicy:
    settings = {"first_delay": 1.0, "max_delay": 8.0, "crash_loop_exits": 5}
    settings.update(overrides)
    return RestartPolicy(crash_loop_window=60.0, clock=clock, **settings)


def test_a_first_exit_is_restarted_after_the_first_delay(clock):
    assert policy(clock).on_exit("scheduler-0") == Restart(delay=1.0, number=1)


def test_exits_close_together_double_the_delay_up_to_the_cap(clock):
    restarts = policy(clock, crash_loop_exits=10)
    delays = []
    for _ in range(6):
        decision = restarts.on_exit("executor-1")
        assert isinstance(decision, Restart)
        delays.append(decision.delay)
        clock.now += 5
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_the_fifth_exit_within_the_window_is_a_crash_loop(clock):
    restarts = policy(clock)
    for number in range(1, 5):
        assert restarts.on_exit("api") == Restart(delay=2.0 ** (number - 1), number=number)
        clock.now += 14
    decision = restarts.on_exit("api")
    assert decision == CrashLoop(exits=5, window=60.0)
    assert str(decision) == "crash loop: 5 exits within 60 s"


def test_exits_spread_wider_than_the_window_never_make_a_crash_loop(clock):
    restarts = policy(clock)
    for number in range(1, 21):
        decision = restarts.on_exit("scheduler-1")
        assert isinstance(decision, Restart)
        assert decision.number == number  # restarts are counted over the whole run
        clock.now += 16  # at most 4 exits in any 60 s


def test_a_process_that_stayed_up_longer_than_the_window_starts_again_from_the_first_delay(
    clock,
):
    restarts = policy(clock)
    for _ in range(3):
        restarts.on_exit("executor-0")
        clock.now += 1
    clock.now += 61
    assert restarts.on_exit("executor-0") == Restart(delay=1.0, number=4)


def test_each_process_has_its_own_count(clock):
    restarts = policy(clock)
    for _ in range(4):
        restarts.on_exit("scheduler-0")
    assert restarts.on_exit("scheduler-1") == Restart(delay=1.0, number=1)
    assert isinstance(restarts.on_exit("scheduler-0"), CrashLoop)


def test_an_impossible_policy_is_refused(clock):
    with pytest.raises(ValueError):
        RestartPolicy(crash_loop_exits=0, clock=clock)
    with pytest.raises(ValueError):
        RestartPolicy(first_delay=5.0, max_delay=1.0, clock=clock)
