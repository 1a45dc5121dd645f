"""The benchmark report's plots (tools/bench/plots.py): drawn from the keys a scenario
returns, skipped when those keys are missing."""

from __future__ import annotations

import pytest

from tools.bench.plots import cdf_points, plot_scenario


def test_cdf_points_are_sorted_with_the_fraction_at_or_below():
    assert cdf_points([3.0, 1.0, 2.0, 4.0]) == ([1.0, 2.0, 3.0, 4.0], [0.25, 0.5, 0.75, 1.0])


FAILOVER = {
    "kill_at_seconds": 8.0,
    "due_over_seconds": 12,
    "pre_kill_finished_per_second": 300,
    "throughput_recovered_after_seconds": 3,
    "series": {
        "finished_per_second": [0, 300, 300, 300, 300, 300, 300, 300, 80, 0, 500, 300, 20],
        "started_late_ms_p99_by_due_second": [
            *(900, 200, 180, 190, 200, 210, 220, 13000),
            *(12000, 9000, 3000, None),
        ],
    },
    "lateness_quantiles_ms": {"due before the kill": [10, 50, 100], "due after": [20, 9000]},
}
FAIRNESS = {  # the shape dispatch.py's run_fairness returns
    "windows": [
        {"second": s, "shares": {"1": 0.14, "2": 0.29, "3": 0.57}, "jain": 0.999} for s in range(5)
    ],
    "ideal_shares": {"1": 0.1429, "2": 0.2857, "3": 0.5714},
}
MANY_USERS = {  # the shape fairness_many.py's run_fairness_many_users returns
    "started_per_second": {"1": [50, 55], "10": [500, 540]},
    "ideal_shares": {"1": 0.0556, "10": 0.5556},
}
THOUSAND_USERS = {"started_per_second": {"min": [0, 3], "median": [2, 5], "max": [4, 6]}}
LATENESS = {"samples_ms": {"started_minus_due": [12.0, 15.0, 40.0, 300.0]}}
END_TO_END = {
    "target_jobs_per_second": 10_000,
    "results": [
        {"schedulers": 1, "executors": 2, "settings": "defaults", "finished_per_second": [0, 9000]}
    ],
}


@pytest.mark.parametrize(
    ("scenario", "result", "files"),
    [
        ("failover", FAILOVER, ["failover_throughput.png", "failover_lateness_cdf.png"]),
        ("dispatch_fairness", FAIRNESS, ["fairness_shares.png"]),
        ("dispatch_lateness", LATENESS, ["lateness_cdf.png"]),
        ("end_to_end", END_TO_END, ["end_to_end_throughput.png"]),
        ("fairness_many_users", MANY_USERS, ["fairness_many_started_per_second.png"]),
        (
            "fairness_thousand_users",
            THOUSAND_USERS,
            ["fairness_thousand_started_per_second.png"],
        ),
        (
            "fairness_with_retries",
            {"attempts_per_second": {"A": [10, 12], "B": [900, 950]}},
            ["fairness_retries_attempts_per_second.png"],
        ),
    ],
)
def test_each_plot_is_a_png_next_to_the_report(tmp_path, scenario, result, files):
    plots = plot_scenario(scenario, result, tmp_path)
    assert [plot.file for plot in plots] == files
    for file in files:
        assert (tmp_path / file).read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    "scenario", ["failover", "dispatch_fairness", "dispatch_lateness", "end_to_end"]
)
def test_a_result_without_the_raw_series_gets_no_plot(tmp_path, scenario):
    assert plot_scenario(scenario, {"markdown": "", "results": [{"jobs": 1}]}, tmp_path) == []
    assert list(tmp_path.iterdir()) == []


def test_a_scenario_without_plots_gets_none(tmp_path):
    assert plot_scenario("api_create", {"results": []}, tmp_path) == []
