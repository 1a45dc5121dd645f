"""The peers benchmark's pure parts: the start records the peers' tasks write, the two
measures, the table and the plot (tools/bench/peers). No servers, no peers installed."""

from __future__ import annotations

import os

import pytest

from tools.bench.peers.records import (
    RECORD_DIR_ENV,
    StartLog,
    censored_lateness,
    count_starts,
    drain_numbers,
    lateness_numbers,
    read_starts,
)
from tools.bench.peers.scenario import peers_markdown, systems_summary
from tools.bench.plots import plot_scenario


def test_a_start_log_writes_a_line_per_job_that_is_counted_and_read_at_once(tmp_path):
    log = StartLog(tmp_path)
    log.record(None)
    log.record(1_700_000_000.25)

    assert count_starts(tmp_path) == 2  # flushed line by line: readable while it runs
    [(first, no_due), (second, due)] = read_starts(tmp_path)
    assert no_due is None
    assert due == 1_700_000_000.25
    assert first <= second
    assert [path.name for path in tmp_path.iterdir()] == [f"starts-{os.getpid()}.txt"]


def test_a_start_log_from_the_environment_writes_where_it_says(tmp_path, monkeypatch):
    monkeypatch.setenv(RECORD_DIR_ENV, str(tmp_path))
    StartLog.from_env().record(5.0)
    assert count_starts(tmp_path) == 1


def test_the_files_of_several_workers_are_read_together(tmp_path):
    (tmp_path / "starts-1.txt").write_text("10.0 -\n11.0 -\n")
    (tmp_path / "starts-2.txt").write_text("10.5 9.5\n")
    assert count_starts(tmp_path) == 3
    assert sorted(read_starts(tmp_path)) == [(10.0, None), (10.5, 9.5), (11.0, None)]


def test_the_drain_rate_is_the_jobs_over_the_first_start_to_the_last():
    starts = [100.0 + n / 1000 for n in range(5001)]  # 5,001 starts over 5 s
    assert drain_numbers(starts) == {"jobs": 5001, "seconds": 5.0, "jobs_per_second": 1000}


def test_a_drain_of_fewer_than_two_jobs_has_no_rate():
    assert drain_numbers([3.0])["jobs_per_second"] is None


def test_lateness_is_start_minus_due_in_milliseconds():
    pairs = [(10.0 + n / 1000, 10.0) for n in range(1, 101)]  # 1..100 ms late
    pairs.append((9.999, 10.0))  # one a millisecond early
    numbers = lateness_numbers(pairs)
    assert numbers["jobs"] == 101
    assert numbers["p50_ms"] == pytest.approx(50.0, abs=0.01)
    assert numbers["p99_ms"] == pytest.approx(99.0, abs=0.01)
    assert numbers["max_ms"] == pytest.approx(100.0, abs=0.01)
    assert numbers["min_ms"] == pytest.approx(-1.0, abs=0.01)


def test_jobs_that_never_started_count_as_starting_at_the_end_of_the_wait():
    dues = [100.0 + n / 10 for n in range(10)]  # 100.0 .. 100.9
    started = [(due + 0.005, due) for due in dues[:8]]  # 5 ms late; the last two never
    numbers = censored_lateness(started, dues, now=110.0)
    assert numbers["unstarted"] == 2
    assert numbers["jobs"] == 10
    assert numbers["p50_ms"] == pytest.approx(5.0, abs=0.01)
    assert numbers["max_ms"] == pytest.approx(9_200.0, abs=0.01)  # 110.0 - 100.8


def test_when_every_job_started_censoring_changes_nothing():
    dues = [100.0 + n / 10 for n in range(10)]
    started = [(due + 0.005, due) for due in dues]
    assert censored_lateness(started, dues, now=500.0) == lateness_numbers(started) | {
        "unstarted": 0
    }


def test_no_jobs_no_lateness():
    assert lateness_numbers([])["p99_ms"] is None


RESULT = {
    "setup": "made up",
    "results": [
        {
            "system": "jobsvc",
            "drain": {"jobs": 100_000, "seconds": 10.0, "jobs_per_second": 10_000},
            "lateness": {"jobs": 83_340, "p50_ms": 12.3, "p99_ms": 48.0, "max_ms": 90.0},
        },
        {
            "system": "celery",
            "drain": {"jobs": 100_000, "seconds": 50.0, "jobs_per_second": 2_000},
            "lateness": {"jobs": 0, "p50_ms": None, "p99_ms": None, "max_ms": None},
        },
    ],
}


def test_the_table_has_a_row_per_system_and_a_dash_for_what_is_missing():
    table = peers_markdown(RESULT).splitlines()
    assert table[2] == "| jobsvc | 10,000 | 12.3 | 48.0 | 90.0 |"
    assert table[3] == "| celery | 2,000 | - | - | - |"
    assert table[-1] == "Setup: made up."


def test_a_peer_that_did_not_finish_shows_lower_bounds_and_says_why():
    row = {
        "system": "celery",
        "drain": {"jobs": 90_000, "seconds": 60.0, "jobs_per_second": 1_500, "unstarted": 10_000},
        "lateness": {"p50_ms": 4000.0, "p99_ms": 9000.0, "max_ms": 9500.0, "unstarted": 700},
    }
    table = peers_markdown({"setup": "made up", "results": [row]})
    assert "| celery | 1,500 | ≥ 4,000.0 | ≥ 9,000.0 | ≥ 9,500.0 |" in table
    assert "10,000 of the drain's jobs had not started" in table
    assert "700 of the timed jobs had not started" in table


def test_the_peers_plot_is_drawn(tmp_path):
    [plot] = plot_scenario("peers", RESULT, tmp_path)
    assert (tmp_path / plot.file).stat().st_size > 1000


def test_the_summary_by_system_has_what_the_docs_page_reads():
    systems = systems_summary(RESULT["results"], {"celery": "5.7.0"})
    assert systems == {
        "jobsvc": {
            "version": None,
            "drain_jobs_per_second": 10_000,
            "lateness_ms": {"p50": 12.3, "p99": 48.0},
        },
        "celery": {
            "version": "5.7.0",
            "drain_jobs_per_second": 2_000,
            "lateness_ms": {"p50": None, "p99": None},
        },
    }
