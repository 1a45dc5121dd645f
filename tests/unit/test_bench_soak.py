"""The soak's arithmetic (tools/bench/soak_numbers.py), its result and table
(tools/bench/soak.py) and its plots, from made-up samples: no servers."""

from __future__ import annotations

import pytest

from tools.bench import memory, soak_numbers
from tools.bench.plots import plot_scenario
from tools.bench.soak_report import Sample, soak_result


def test_histograms_of_the_shards_add_up_by_minute_and_millisecond():
    rows = [(0, 10, 5), (0, 12, 1), (1, 10, 2), (0, 10, 3)]  # two shards' rows
    assert soak_numbers.merge_histograms(rows) == {0: {10: 8, 12: 1}, 1: {10: 2}}


def test_percentiles_of_counts_are_nearest_rank():
    counts = dict.fromkeys(range(1, 101), 1)  # 1..100 ms, one job each
    assert soak_numbers.percentile_of_counts(counts, 50) == 50
    assert soak_numbers.percentile_of_counts(counts, 99) == 99
    assert soak_numbers.percentile_of_counts(counts, 100) == 100
    assert soak_numbers.percentile_of_counts({7: 990, 500: 10}, 99) == 7
    assert soak_numbers.percentile_of_counts({7: 989, 500: 11}, 99) == 500
    assert soak_numbers.percentile_of_counts({}, 99) is None


def test_minute_lateness_reports_every_minute_even_without_jobs():
    rows = soak_numbers.minute_lateness({0: {5: 98, 40: 1, 900: 1}, 2: {-3: 1, 8: 1}}, 3)
    assert rows == [
        {"jobs": 100, "p50_ms": 5, "p99_ms": 40, "max_ms": 900},
        {"jobs": 0, "p50_ms": None, "p99_ms": None, "max_ms": None},
        {"jobs": 2, "p50_ms": -3, "p99_ms": 8, "max_ms": 8},
    ]


def test_per_minute_rate_is_events_per_second():
    assert soak_numbers.per_minute_rate({0: 83_340, 2: 60}, 3) == [1389.0, 0.0, 1.0]


def test_a_minute_level_is_the_mean_of_its_samples_and_samples_outside_are_dropped():
    start = 1000.0
    samples = [(990.0, 999.0), (1000.0, 10.0), (1030.0, 20.0), (1065.0, 40.0), (1200.0, 7.0)]
    assert soak_numbers.minute_levels(samples, start=start, minutes=3) == [15.0, 40.0, None]


def test_minute_rates_are_a_counters_rise_over_the_time_between_its_samples():
    samples = [(0.0, 0.0), (10.0, 5.0), (50.0, 25.0), (60.0, 25.0), (70.0, 45.0)]
    # minute 1: 25 CPU seconds over 50 s; minute 2: 20 over 10 s
    assert soak_numbers.minute_rates(samples, start=0.0, minutes=3) == [0.5, 2.0, None]


def test_least_squares_slope():
    assert soak_numbers.least_squares_slope([(0, 1.0), (1, 3.0), (2, 5.0)]) == 2.0
    assert soak_numbers.least_squares_slope([(0, 4.0)]) == 0.0


def test_a_process_that_settles_after_minute_1_does_not_grow():
    levels = [40.0, 80.0, 81.0, 79.0, 80.5, 80.0]  # start-up, then flat
    verdict = soak_numbers.growth(levels)
    assert verdict["grows"] is False
    assert verdict["level"] == pytest.approx(80.1, abs=0.1)


def test_a_process_that_climbs_steadily_grows():
    levels = [80.0 + 2.0 * minute for minute in range(30)]  # 2 MiB a minute: +56 of ~110
    verdict = soak_numbers.growth(levels)
    assert verdict["grows"] is True
    assert verdict["slope_per_minute"] == 2.0
    assert verdict["growth"] == 56.0


def test_growth_within_the_tolerance_passes():
    levels = [100.0 + 0.3 * minute for minute in range(30)]  # +8.4 MiB over ~105: 8 %
    assert soak_numbers.growth(levels)["grows"] is False


def test_growth_needs_two_minutes_from_minute_2_on():
    assert soak_numbers.growth([50.0, 60.0])["grows"] is None
    assert soak_numbers.growth([50.0, None, 60.0])["grows"] is None


def test_correlation_is_pearsons_r_over_the_minutes_known_in_both():
    assert soak_numbers.correlation([10, 20, 30, None], [1.0, 1.2, 1.4, 1.9]) == 1.0
    assert soak_numbers.correlation([30, 20, 10], [1.0, 1.2, 1.4]) == -1.0
    assert soak_numbers.correlation([10, 20], [1.0, 1.2]) is None  # too few minutes
    assert soak_numbers.correlation([10, 10, 10], [1.0, 1.2, 1.4]) is None  # no variation


def test_drift_is_the_p99_trend_from_minute_2_and_the_load_generators_cpu_later_over_earlier():
    result = {
        "per_minute": {"started_minus_due_ms": _minutes(50, 10, 12, 14, 16)},
        "cpu_cores": {"loadgen": [0.5, 0.10, 0.10, 0.12, 0.12]},
    }
    # Minute 1 counts in neither: its p99 and CPU are start-up's.
    assert soak_numbers.drift(result) == {"p99_trend_ms": 6.0, "loadgen_cpu": 1.2}
    assert soak_numbers.later_over_earlier([0.5, 0.1]) is None  # one minute from minute 2


def _minutes(*p99s):
    return [{"jobs": 10, "p50_ms": 1, "p99_ms": p99, "max_ms": p99} for p99 in p99s]


def test_lateness_passes_when_every_p99_is_low_and_none_creeps():
    checks = soak_numbers.lateness_checks(_minutes(55, 40, 45, 59))
    assert checks["passed"] is True
    assert checks["minute_2_p99_ms"] == 40


def test_minute_1_counts_against_minute_2_too():
    assert soak_numbers.lateness_checks(_minutes(80, 40, 45))["minutes_crept"] == [1]


def test_lateness_fails_a_minute_over_100_ms_or_over_one_and_a_half_times_minute_2():
    checks = soak_numbers.lateness_checks(_minutes(41, 40, 45, 94, 69, 114, 97))
    assert checks["minutes_over_limit"] == [6]
    assert checks["minutes_crept"] == [4, 5, 6, 7]
    assert checks["passed"] is False


def test_a_minute_in_which_no_job_ran_fails():
    rows = _minutes(10, 10)
    rows.append({"jobs": 0, "p50_ms": None, "p99_ms": None, "max_ms": None})
    assert soak_numbers.lateness_checks(rows)["minutes_over_limit"] == [3]


def test_the_creep_bound_is_one_and_a_half_times_minute_2s_p99_and_1_ms_at_least():
    assert soak_numbers.creep_bound_ms({1: {4: 99, 8: 1}}) == 6.0
    assert soak_numbers.creep_bound_ms({1: {0: 100}}) == 1.5
    assert soak_numbers.creep_bound_ms({0: {4: 100}}) is None


def test_late_jobs_tell_how_much_the_worst_seconds_hold_and_the_spread_over_shards():
    # 100 seconds; (second, shard, partition, jobs, late): 2 bursty seconds hold 90 late jobs.
    rows = [
        (second, second % 2, second % 3, 100, 1 if second % 10 == 0 else 0) for second in range(100)
    ]
    rows += [(7, 0, 1, 100, 50), (8, 1, 2, 100, 40)]
    late = soak_numbers.late_jobs(rows, 12.0)
    assert (late["late_ms"], late["late"], late["seconds"], late["worst_seconds"]) == (
        12.0,
        100,
        100,
        2,
    )
    assert late["late_pct"] == round(100 * 100 / 10_200, 2)
    assert late["in_worst_seconds"] == 0.9
    # shard 0: 10 late in the even seconds and 50 in second 7; shard 1: 40 in second 8
    assert late["by_shard_pct"] == [round(100 * 40 / 5_100, 2), round(100 * 60 / 5_100, 2)]
    assert len(late["by_partition_pct"]) == 2


def test_smaps_rollup_is_read_in_mib():
    text = "55-7f ---p 00000000 00:00 0 [rollup]\nRss:  2048 kB\nPss:  1024 kB\nPss_Anon: 512 kB\n"
    assert memory.parse_rollup(text) == {"rss": 2.0, "pss": 1.0, "pss_anon": 0.5}


def test_a_process_tree_holds_every_descendant():
    children = memory.children_of({10: 1, 11: 10, 12: 10, 13: 12, 20: 1})
    assert sorted(memory.tree_of(10, children)) == [10, 11, 12, 13]


def test_sampling_this_process_finds_its_memory():
    import os

    sampled = memory.sample([memory.Role("me", os.getpid(), tree=True)])
    assert sampled["me"]["rss"] > 1
    assert 0 < sampled["me"]["pss"] <= sampled["me"]["rss"]


# --- the whole result, from made-up samples -------------------------------------------

ROLES = [memory.Role("scheduler-1", 1), memory.Role("executor-1", 2), memory.Role("broker", 3)]


def _samples(minutes: int, *, executor_growth: float = 0.0) -> list[Sample]:
    samples = []
    for n in range(minutes * 6):  # every 10 s from the first request
        at = 1000.0 + 10 * n + 1
        minute = n // 6
        samples.append(
            Sample(
                at=at,
                memory={
                    "scheduler-1": {"rss": 70.0, "pss": 60.0},
                    "executor-1": {"rss": 90.0 + executor_growth * minute, "pss": 80.0},
                    "broker": {"rss": 600.0, "pss": 590.0 + executor_growth * minute},
                },
                tables={"total_mib": 10.0 * (minute + 1), "indexes_mib": 4.0, "dead_tuples": 9.0},
                indexes={"jobs_pkey": 2.0},
                cpu={"executor": 0.5 * n, "machine": 1.5 * n},
                broker_disk_mib=100.0,
                page_cache_mib=900.0,
            )
        )
    return samples


def _jobs(minutes: int, p99: int = 40) -> dict:
    histogram = {minute: {5: 98, p99: 1, p99 + 10: 1} for minute in range(minutes)}
    return {
        "first_due": 1005.0,
        "first_request": 1000.0,
        "statuses": {"succeeded": 83_340 * minutes},
        "early": 0,
        "started_minus_due": histogram,
        "dispatched_minus_due": histogram,
        "created_per_minute": dict.fromkeys(range(minutes), 83_340),
        "started_per_minute": dict.fromkeys(range(minutes), 83_340),
    }


LOADGEN = {"created": 83_340 * 4, "errors": {"total": 0}, "dropped_slots": 0}
SETUP = "2 schedulers, 2 executors"


def test_a_steady_soak_passes_and_its_table_has_a_row_a_minute():
    result = soak_result(
        minutes=4, samples=_samples(4), jobs=_jobs(4), loadgen=LOADGEN, roles=ROLES, setup=SETUP
    )
    assert result["passed"] is True, result["checks"]
    assert result["per_minute"]["created_per_s"] == [1389.0] * 4
    assert result["per_minute"]["started_minus_due_ms"][0]["p99_ms"] == 40
    assert result["memory_mib"]["broker"]["pss_mib"] == [590.0] * 4
    assert result["tables"]["total_mib"] == [10.0, 20.0, 30.0, 40.0]
    assert result["cpu_cores"]["executor"] == [0.05] * 4
    table = result["markdown"].splitlines()
    assert table[2].startswith("| 1 | 1,389 | 1,389 | 5 / 40 / 50 |")
    assert len([line for line in table if line.startswith("| ")]) == 1 + 4  # header, minutes
    assert table[2].endswith("| 0.15 |")  # cores busy: 1.5 CPU-s per 10 s
    assert "**Passed.**" in result["markdown"]


def test_the_soak_tells_where_the_jobs_that_fail_a_minute_were():
    jobs = {**_jobs(4), "late_ms": 60.0, "late_rows": [(0, 0, 0, 100, 2), (1, 1, 1, 100, 0)]}
    result = soak_result(
        minutes=4, samples=_samples(4), jobs=jobs, loadgen=LOADGEN, roles=ROLES, setup=SETUP
    )
    assert result["late_jobs"]["late"] == 2
    assert (
        "Jobs later than 60 ms (1.5 x minute 2's p99): 2 (1 %), 100% of them due in the "
        "worst 1 of 2 seconds; 0-2 % of each shard's jobs, 0-2 % of each partition's."
    ) in result["markdown"]


def test_a_growing_broker_and_a_worker_over_150_mib_fail_the_soak():
    result = soak_result(
        minutes=6,
        samples=_samples(6, executor_growth=20.0),
        jobs=_jobs(6),
        loadgen={**LOADGEN, "created": 83_340 * 6},
        roles=ROLES,
        setup=SETUP,
    )
    assert result["checks"]["memory_growth"]["grown"] == ["broker"]
    assert result["checks"]["worker_rss"]["peaks_mib"]["executor-1"] == 190.0
    assert result["checks"]["worker_rss"]["passed"] is False
    assert result["passed"] is False
    assert "**Failed.**" in result["markdown"]


def test_a_job_that_never_ran_fails_the_soak():
    jobs = _jobs(4)
    jobs["statuses"] = {"succeeded": 83_340 * 4 - 1, "queued": 1}
    result = soak_result(
        minutes=4, samples=_samples(4), jobs=jobs, loadgen=LOADGEN, roles=ROLES, setup=SETUP
    )
    assert result["checks"]["every_job_ran"]["passed"] is False


def test_the_soak_plots_lateness_memory_and_tables(tmp_path):
    result = soak_result(
        minutes=4, samples=_samples(4), jobs=_jobs(4), loadgen=LOADGEN, roles=ROLES, setup=SETUP
    )
    plots = plot_scenario("soak", result, tmp_path)
    assert [plot.file for plot in plots] == [
        "soak_lateness.png",
        "soak_memory.png",
        "soak_tables.png",
    ]
    assert all((tmp_path / plot.file).stat().st_size > 1000 for plot in plots)


def test_shared_buffers_filling_up_is_not_growth_but_private_memory_is():
    roles = [memory.Role("postgres-a", 9, tree=True)]

    def samples(private_growth: float) -> list[Sample]:
        return [
            Sample(
                at=1000.0 + 10 * n,
                memory={
                    "postgres-a": {
                        "rss": 900.0,
                        "pss": 60.0 + 20.0 * (n // 6) + private_growth * (n // 6),
                        "pss_shmem": 20.0 * (n // 6),  # the shared buffers being touched
                    }
                },
                tables={},
                indexes={},
                cpu={},
                broker_disk_mib=0.0,
                page_cache_mib=0.0,
            )
            for n in range(6 * 6)
        ]

    filling = soak_result(
        minutes=6, samples=samples(0.0), jobs=_jobs(6), loadgen=LOADGEN, roles=roles, setup=SETUP
    )
    assert filling["memory_mib"]["postgres-a"]["pss_mib"][-1] == 160.0
    assert filling["checks"]["memory_growth"]["grown"] == []
    leaking = soak_result(
        minutes=6, samples=samples(5.0), jobs=_jobs(6), loadgen=LOADGEN, roles=roles, setup=SETUP
    )
    assert leaking["checks"]["memory_growth"]["grown"] == ["postgres-a"]


def test_a_minute_the_load_generator_fell_behind_in_fails_the_soak():
    jobs = _jobs(4)
    jobs["created_per_minute"][2] = 1_300 * 60  # 1,300 jobs/s: not the design peak
    result = soak_result(
        minutes=4, samples=_samples(4), jobs=jobs, loadgen=LOADGEN, roles=ROLES, setup=SETUP
    )
    assert result["checks"]["rate_held"] == {
        "at_least": 1361.2,
        "minutes_short": [3],
        "passed": False,
    }
    assert result["passed"] is False
    assert "(no: minutes 3)" in result["markdown"]
