"""docs/benchmarks.md rendered from a small results directory (tests/unit/bench_results)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tools.bench import docs

FIXTURE = Path(__file__).parent / "bench_results"


@pytest.fixture
def results_dir(tmp_path) -> Path:
    directory = tmp_path / "bench-results"
    shutil.copytree(FIXTURE, directory)
    (directory / "lateness_cdf.png").write_bytes(b"\x89PNG lateness")  # failover's is missing
    return directory


def _row(text: str, scenario: str, what: str = "") -> str:
    (line,) = [line for line in text.splitlines() if f"(`{scenario}`)" in line and what in line]
    return line


def test_each_promise_is_judged_from_the_numbers(results_dir):
    text = docs.render(results_dir, None)
    assert _row(text, "api_create", "single").endswith("| 1,250 requests/s, p99 21.5 ms | pass |")
    assert _row(text, "api_create", "bulk").endswith("| **fail** |")
    assert _row(text, "dispatch_lateness").endswith("| started - due p50 5.5, p99 80.2 ms | pass |")
    assert _row(text, "failover").endswith("| pass |")


def test_a_failover_whose_throughput_did_not_recover_is_still_judged_by_loss(results_dir):
    results_file = results_dir / "results.json"
    results = json.loads(results_file.read_text())
    results["failover"]["throughput_recovered_after_seconds"] = None
    results_file.write_text(json.dumps(results))
    text = docs.render(results_dir, None)
    assert _row(text, "failover").endswith("throughput not back while jobs came due | pass |")


def test_a_scenario_not_run_or_a_number_missing_gets_no_verdict(results_dir):
    text = docs.render(results_dir, None)
    assert _row(text, "end_to_end").endswith("| TBD | — |")
    assert _row(text, "fairness_end_to_end").endswith("| n/a (no jain_min in the result) | — |")


def test_the_page_names_the_machine_the_date_and_the_command(results_dir):
    text = docs.render(results_dir, None)
    assert "2026-11-28T10:00:00+00:00, a full run, on 2 cores" in text
    assert "Command: `make bench`" in text
    assert "- `api_create`: gunicorn, 4 sync workers." in text


def test_the_page_names_the_yardsticks_time_at_the_start_and_end_of_the_run(results_dir):
    results_file = results_dir / "results.json"
    results = json.loads(results_file.read_text())
    results["machine"] |= {"reference_ms_start": 58.6, "reference_ms_end": 61.0}
    results_file.write_text(json.dumps(results))
    text = docs.render(results_dir, None)
    assert "machine_speed.py) took 58.6 ms at the start and 61.0 ms at the end." in text


def test_the_page_names_the_commit_the_run_measured(results_dir):
    results_file = results_dir / "results.json"
    results = json.loads(results_file.read_text())
    results["machine"] |= {"commit": "1b9715c"}
    results_file.write_text(json.dumps(results))
    text = docs.render(results_dir, None)
    assert "2026-11-28T10:00:00+00:00 at commit 1b9715c, a full run" in text


def test_a_scenario_from_a_run_of_its_own_is_judged_and_its_run_named(results_dir, tmp_path):
    soak_run = tmp_path / "soak-results"
    shutil.copytree(results_dir, soak_run)
    first, other = results_dir / "results.json", soak_run / "results.json"
    results, its_own = json.loads(first.read_text()), json.loads(other.read_text())
    del results["failover"]
    its_own["machine"] |= {"date": "2026-11-29T12:00:00+00:00", "commit": "abc1234"}
    del its_own["api_create"]
    first.write_text(json.dumps(results))
    other.write_text(json.dumps(its_own))
    assert _row(docs.render(results_dir, None), "failover").endswith("| TBD | — |")
    text = docs.render(results_dir, None, add=[soak_run])
    assert _row(text, "failover").endswith("| pass |")
    assert (
        "`failover`: a run of its own (`make bench ARGS='--only failover'`, then `--add` here)"
        " on 2026-11-29T12:00:00+00:00 at commit abc1234" in text
    )
    assert "`api_create`: a run of its own" not in text  # the first run has it


def test_the_peers_are_listed_beside_jobsvc_and_the_missing_ones_are_tbd(results_dir):
    text = docs.render(results_dir, None)
    assert "| jobsvc 0.2.0 | 15,000 | 6 ms | 24 ms |" in text
    assert "| pgqueuer 0.0.1 | 3,000 | 40 ms | 90 ms |" in text
    assert "| celery | TBD | TBD | TBD |" in text


def test_plots_are_copied_beside_the_page_and_linked_from_it(results_dir, tmp_path):
    out = tmp_path / "docs" / "benchmarks.md"
    out.parent.mkdir()
    assert docs.main([str(results_dir), "--out", str(out)]) == 0
    text = out.read_text()
    assert "![Lateness at the design peak](benchmarks/lateness_cdf.png)" in text
    assert (out.parent / "benchmarks" / "lateness_cdf.png").read_bytes() == b"\x89PNG lateness"
    assert "failover_throughput.png" not in text  # not in the results directory


def test_the_template_has_every_promise_and_no_verdict():
    text = docs.render(None, None)
    assert "Measured on: TBD" in text
    for promise in docs.PROMISES:
        assert _row(text, promise.scenario, promise.what).endswith("| TBD | — |")
    assert "| pass |" not in text and "| **fail** |" not in text


def test_the_soak_row_names_the_figures_its_checks_judged(results_dir):
    text = docs.render(results_dir, None)
    assert _row(text, "soak").endswith(
        "| p99 8-14 ms a minute, 1 minute over 1.5x minute 2's 8 ms; memory grew: broker; "
        "workers ≤ 91 MiB; 250,020 of 250,020 jobs ran | **fail** |"
    )


def test_the_soak_row_says_how_closely_a_creeping_p99_followed_the_machines_load(results_dir):
    results = json.loads((results_dir / "results.json").read_text())
    soak = results["soak"]
    p99s = [minute["p99_ms"] for minute in soak["per_minute"]["started_minus_due_ms"]]
    soak["cpu_cores"] = {"machine": [1.0 + p99 / 100 for p99 in p99s]}
    (results_dir / "results.json").write_text(json.dumps(results))
    row = _row(docs.render(results_dir, None), "soak")
    assert "over 1.5x minute 2's 8 ms (r = 1.00 with the machine's busy cores);" in row


def test_the_soak_row_says_how_much_of_the_late_jobs_the_worst_seconds_hold(results_dir):
    results = json.loads((results_dir / "results.json").read_text())
    results["soak"]["late_jobs"] = {
        "late": 90,
        "in_worst_seconds": 0.5,
        "worst_seconds": 2,
        "seconds": 120,
    }
    (results_dir / "results.json").write_text(json.dumps(results))
    row = _row(docs.render(results_dir, None), "soak")
    assert (
        "over 1.5x minute 2's 8 ms, 50% of the jobs over that due in the worst 2 of 120 seconds;"
        in row
    )


def test_the_soak_row_names_minutes_short_of_the_rate_and_early_jobs(results_dir):
    results = json.loads((results_dir / "results.json").read_text())
    checks = results["soak"]["checks"]
    checks["rate_held"] = {"minutes_short": [2], "passed": False}
    checks["every_job_ran"].update(early=3, passed=False)
    (results_dir / "results.json").write_text(json.dumps(results))
    row = _row(docs.render(results_dir, None), "soak")
    assert "| rate short in minutes [2]; p99 8-14 ms a minute" in row
    assert row.endswith("250,020 of 250,020 jobs ran, 3 early | **fail** |")


def test_a_soak_short_of_the_rate_in_every_minute_says_so_once(results_dir):
    results = json.loads((results_dir / "results.json").read_text())
    results["soak"]["checks"]["rate_held"] = {"minutes_short": [1, 2, 3], "passed": False}
    (results_dir / "results.json").write_text(json.dumps(results))
    row = _row(docs.render(results_dir, None), "soak")
    assert "| rate short in every minute; p99 8-14 ms a minute" in row
