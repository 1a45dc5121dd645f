"""Retry backoff: exponential, capped, jittered within [half, all] of the exponential delay."""

from __future__ import annotations

import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from executor_worker.retry_policy import RetryPolicy, retry_delay
from jobsvc.handlers.errors import (
    HandlerTimeout,
    InvalidHandlerParams,
    PermanentError,
    RetryableError,
    UnknownHandler,
)


class _Fixed(random.Random):
    """An rng whose random() always returns the same value."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def test_the_first_retry_waits_between_half_the_base_and_the_base():
    assert retry_delay(attempt=1, base=2.0, cap=100.0, rng=_Fixed(0.0)) == 1.0
    assert retry_delay(attempt=1, base=2.0, cap=100.0, rng=_Fixed(0.999999)) == pytest.approx(2.0)


def test_each_retry_doubles_the_window():
    lowest = [retry_delay(attempt=n, base=1.0, cap=1e9, rng=_Fixed(0.0)) for n in range(1, 7)]
    highest = [retry_delay(attempt=n, base=1.0, cap=1e9, rng=_Fixed(0.99)) for n in range(1, 7)]

    assert lowest == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
    assert highest == pytest.approx([0.995, 1.99, 3.98, 7.96, 15.92, 31.84])


def test_the_cap_bounds_every_delay_and_keeps_half_of_it_as_a_floor():
    rng = random.Random(3)

    delays = [retry_delay(attempt=n, base=1.0, cap=60.0, rng=rng) for n in range(7, 40)]

    assert all(30.0 <= delay <= 60.0 for delay in delays)


def test_a_huge_attempt_number_does_not_overflow():
    assert retry_delay(attempt=10**6, base=5.0, cap=600.0, rng=_Fixed(0.0)) == 300.0


def test_jitter_spreads_delays_evenly_over_the_window():
    rng = random.Random(20240601)

    delays = [retry_delay(attempt=4, base=1.0, cap=1000.0, rng=rng) for _ in range(20_000)]

    # Uniform on [4, 8]: mean 6, standard deviation 4 / sqrt(12) ~ 1.155.
    assert min(delays) >= 4.0
    assert max(delays) <= 8.0
    assert statistics.fmean(delays) == pytest.approx(6.0, abs=0.05)
    assert statistics.pstdev(delays) == pytest.approx(4 / 12**0.5, abs=0.05)
    quarters = [sum(4 + i <= d < 5 + i for d in delays) for i in range(4)]
    assert all(abs(count - 5_000) < 300 for count in quarters)


def test_the_same_seed_gives_the_same_delays():
    first = [retry_delay(attempt=3, base=1.0, cap=10.0, rng=random.Random(7)) for _ in range(3)]
    second = [retry_delay(attempt=3, base=1.0, cap=10.0, rng=random.Random(7)) for _ in range(3)]

    assert first == second


def test_without_an_rng_the_delay_is_still_within_the_window():
    assert 2.0 <= retry_delay(attempt=2, base=2.0, cap=10.0) <= 4.0


@pytest.mark.parametrize(
    ("attempt", "base", "cap"),
    [(0, 1.0, 1.0), (-1, 1.0, 1.0), (1, -1.0, 1.0), (1, 1.0, -1.0), (1, float("inf"), 1.0)],
)
def test_nonsense_arguments_are_refused(attempt, base, cap):
    with pytest.raises(ValueError):
        retry_delay(attempt=attempt, base=base, cap=cap)


@given(
    attempt=st.integers(min_value=1, max_value=5_000),
    base=st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False),
    cap=st.floats(min_value=0, max_value=1e7, allow_nan=False, allow_infinity=False),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_a_delay_is_never_negative_never_above_the_cap_nor_below_half_its_ceiling(
    attempt, base, cap, seed
):
    delay = retry_delay(attempt=attempt, base=base, cap=cap, rng=random.Random(seed))

    ceiling = min(cap, base * 2.0 ** min(attempt - 1, 1000))
    assert 0.0 <= delay <= cap
    assert ceiling / 2 <= delay <= ceiling


@given(
    attempt=st.integers(min_value=1, max_value=60),
    base=st.floats(min_value=0.001, max_value=100, allow_nan=False),
    fraction=st.floats(min_value=0, max_value=0.999999),
)
def test_for_the_same_draw_a_later_retry_never_waits_less(attempt, base, fraction):
    rng = _Fixed(fraction)

    assert retry_delay(attempt=attempt + 1, base=base, cap=3600.0, rng=rng) >= retry_delay(
        attempt=attempt, base=base, cap=3600.0, rng=rng
    )


# --- RetryPolicy -------------------------------------------------------------------------

POLICY = RetryPolicy(max_attempts=3, base_delay=1.0, max_delay=60.0)


@pytest.mark.parametrize(
    "error",
    [RetryableError("503"), HandlerTimeout("slow"), RuntimeError("a bug"), UnknownHandler("x")],
)
def test_a_retryable_or_unexpected_error_is_retried_while_attempts_remain(error):
    assert POLICY.should_retry(1, error)
    assert POLICY.should_retry(2, error)


def test_the_last_attempt_is_not_retried():
    assert not POLICY.should_retry(3, RetryableError("503"))
    assert not POLICY.should_retry(4, RetryableError("503"))


@pytest.mark.parametrize("error", [PermanentError("404"), InvalidHandlerParams("url: bad")])
def test_a_permanent_error_is_never_retried(error):
    assert not POLICY.should_retry(1, error)


def test_one_max_attempt_means_no_retry_at_all():
    policy = RetryPolicy(max_attempts=1, base_delay=1.0, max_delay=1.0)

    assert not policy.should_retry(1, RetryableError("503"))


def test_the_delay_after_a_failed_attempt_is_that_retry_numbers_delay():
    assert POLICY.next_delay(1, rng=_Fixed(0.0)) == 0.5
    assert POLICY.next_delay(3, rng=_Fixed(0.0)) == 2.0
    assert POLICY.next_delay(30, rng=_Fixed(0.0)) == 30.0


@pytest.mark.parametrize(
    ("max_attempts", "base_delay", "max_delay"),
    [(0, 1.0, 1.0), (3, -1.0, 1.0), (3, 2.0, 1.0), (3, 1.0, float("inf"))],
)
def test_a_policy_with_nonsense_settings_is_refused(max_attempts, base_delay, max_delay):
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=max_attempts, base_delay=base_delay, max_delay=max_delay)
