"""Counting users' shares per 1-second window (tools/bench/shares.py), as the fairness
benchmark and the end-to-end fairness test do."""

from __future__ import annotations

from collections import Counter

import pytest

from tools.bench.shares import (
    backlogged_windows,
    coefficient_of_variation,
    jain_index,
    last_backlogged_second,
    longest_gap,
    shares,
    weighted_shares,
)


def test_windows_end_at_the_first_users_last_start_and_drop_the_partial_second():
    starts = {"a": [10.0, 10.5, 11.2, 12.9], "b": [10.1, 11.0, 12.4, 13.5, 14.0]}

    # "a" started its last job 2.9 s after the first start: windows 0 and 1 are whole.
    assert backlogged_windows(starts) == [Counter(a=2, b=1), Counter(a=1, b=1)]


def test_the_last_backlogged_second_ends_at_the_first_users_last_start():
    starts = {"a": [10.0, 11.8, 12.0, 12.9], "b": [10.1, 11.5, 12.4, 12.6, 13.5, 14.0]}

    # "a" ran out at 12.9: the second before holds two of its starts and two of b's.
    assert last_backlogged_second(starts) == Counter(a=2, b=2)


def test_shares_are_of_the_jobs_counted_and_weighted_shares_of_the_weights():
    assert shares(Counter(a=1, b=3), ["a", "b", "c"]) == {"a": 0.25, "b": 0.75, "c": 0.0}
    assert weighted_shares({"a": 1.0, "b": 2.0, "c": 4.0}) == pytest.approx(
        {"a": 1 / 7, "b": 2 / 7, "c": 4 / 7}
    )


def test_jain_index_is_one_when_equal_and_one_over_n_when_one_takes_all():
    assert jain_index([1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert jain_index([3.0, 0.0, 0.0]) == pytest.approx(1 / 3)


def test_longest_gap_counts_the_wait_before_the_first_start():
    assert longest_gap([12.5, 11.0, 13.0], since=10.0) == pytest.approx(1.5)
    assert longest_gap([10.2, 10.4, 12.4], since=10.0) == pytest.approx(2.0)
    assert longest_gap([], since=10.0) == 0.0


def test_coefficient_of_variation_is_zero_when_equal():
    assert coefficient_of_variation([5, 5, 5]) == 0.0
    assert coefficient_of_variation([90, 110]) == pytest.approx(0.1)


def test_a_fairness_run_too_short_for_a_whole_window_is_reported_not_a_crash():
    from tools.bench.fairness import _fairness_result

    # The weight-4 user ran out 0.6 s after the first start: no whole window to judge.
    starts = {1: [100.0, 100.4, 101.5], 2: [100.1, 100.3, 101.2], 3: [100.0, 100.2, 100.6]}
    result = _fairness_result(starts, [1, 2, 3], due=99.9, jobs="3 no-op jobs each, in ")
    assert result["contended_seconds"] == 0
    assert "No whole 1-s window" in result["markdown"]
