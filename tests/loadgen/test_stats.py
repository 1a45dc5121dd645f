"""Percentiles, the per-second line and the summary of the load generator."""

from __future__ import annotations

import pytest

from tools.loadgen import stats


def test_percentile_is_the_nearest_rank():
    values = list(range(1, 101))
    assert stats.percentile(values, 50) == 50
    assert stats.percentile(values, 99) == 99
    assert stats.percentile(values, 100) == 100
    assert stats.percentile(list(range(1, 1001)), 99.9) == 999
    assert stats.percentile([7.0], 50) == 7.0
    assert stats.percentile([], 50) is None
    with pytest.raises(ValueError):
        stats.percentile(values, 0)


def test_distribution_is_in_milliseconds_with_the_summary_percentiles():
    seconds = [i / 1000 for i in range(1, 1001)]  # 1 ms .. 1000 ms
    assert stats.distribution_ms(seconds) == {
        "p50_ms": 500.0,
        "p99_ms": 990.0,
        "p99_9_ms": 999.0,
        "max_ms": 1000.0,
    }
    assert stats.distribution_ms([])["max_ms"] is None


def test_a_line_lines_up_under_the_header_and_shows_rates_per_second():
    second = stats.Second(
        t=12,
        created=1000,
        dispatched=990,
        executed=980,
        backlog=1234,
        started_lateness=[0.010] * 98 + [0.200, 0.300],
        finished_lateness=[0.020] * 100,
        errors=3,
        seconds=2.0,  # an observation that took two seconds halves the counts
    )
    header, line = stats.header(), stats.line(second)
    assert len(line) == len(header)
    assert line.split() == [
        "12",
        "500",
        "495",
        "490",
        "1,234",
        "10",
        "/",
        "200",
        "20",
        "/",
        "20",
        "3",
    ]
    assert second.as_dict()["started_p99_ms"] == 200.0
    assert second.as_dict()["executed_per_s"] == 490.0


def test_a_second_without_finished_jobs_shows_a_dash_for_lateness():
    line = stats.line(stats.Second(t=1, created=5, dispatched=0, executed=0, backlog=5))
    assert line.split()[-3:] == ["-", "-", "0"]
    assert (
        stats.Second(t=1, created=0, dispatched=0, executed=0, backlog=0).as_dict()[
            "finished_p50_ms"
        ]
        is None
    )


def make_summary(**overrides) -> stats.Summary:
    values = {
        "config": {"rate": 100},
        "seconds": 12.0,
        "creating_seconds": 10.0,
        "requests": 1000,
        "created": 990,
        "dispatched": 990,
        "statuses": {"succeeded": 985, "failed": 5},
        "unfinished_due": 0,
        "not_yet_due": 0,
        "started_lateness": [0.05] * 990,
        "finished_lateness": [0.06] * 990,
        "request_latency": [0.004] * 990,
        "errors": {"HTTP 503": 10},
        "dropped_slots": 0,
        "interrupted": False,
        "series": [],
    }
    return stats.Summary(**(values | overrides))


def test_the_summary_counts_failed_jobs_as_executed_and_rates_over_their_periods():
    data = make_summary().as_dict()
    assert data["executed"] == 990
    assert data["created_per_second"] == 99.0  # over the 10 s of creating
    assert data["executed_per_second"] == 82.5  # over the 12 s of the whole run
    assert data["errors"] == {"total": 10, "by_kind": {"HTTP 503": 10}}
    assert data["lateness"]["finished_minus_execute_at"]["p99_9_ms"] == 60.0


def test_the_summary_text_says_when_the_run_was_interrupted_or_fell_behind():
    text = make_summary(interrupted=True, dropped_slots=40).text()
    assert text.startswith("summary (interrupted)")
    assert "p99.9 50.0" in text
    assert "40 request slots dropped" in text
    assert "(interrupted)" not in make_summary().text()
