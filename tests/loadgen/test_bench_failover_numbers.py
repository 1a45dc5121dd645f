"""The failover scenario's arithmetic (tools/bench/failover.py): per-second counts,
when throughput counts as recovered, and the quantiles kept for the lateness plot."""

from __future__ import annotations

from tools.bench.failover import per_second, quantiles, recovery_second


def test_per_second_counts_whole_seconds_from_the_start_and_ignores_the_rest():
    times = [100.0, 100.5, 100.99, 101.0, 102.7, 99.9, 103.0]
    assert per_second(times, start=100.0, seconds=3) == [3, 1, 1]


def test_throughput_recovers_at_the_first_run_of_seconds_back_at_the_level():
    counts = [300, 300, 300, 80, 75, 0, 310, 100, 600, 290, 300, 300]
    # Second 6 is back at the level but second 7 is not; 8 starts three good seconds.
    assert recovery_second(counts, level=300, after=3, fraction=0.9, for_seconds=3) == 8


def test_no_dip_means_recovered_at_the_kill_and_no_recovery_means_none():
    steady = [300] * 10
    assert recovery_second(steady, level=300, after=4, fraction=0.9, for_seconds=3) == 4
    stalled = [300] * 4 + [0] * 6
    assert recovery_second(stalled, level=300, after=4, fraction=0.9, for_seconds=3) is None


def test_quantiles_keep_the_minimum_and_maximum_and_are_evenly_spaced():
    values = [float(v) for v in range(10_001)]
    kept = quantiles(values, n=100)
    assert len(kept) == 101
    assert kept[0] == 0.0
    assert kept[50] == 5000.0
    assert kept[-1] == 10_000.0
    assert quantiles([]) == []
