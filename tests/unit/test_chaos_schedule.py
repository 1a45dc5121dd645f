"""The chaos campaign's schedule and verdict: which faults may run at once, when a run
fails (tools/chaos/runner.py, report.py, probes.py)."""

from __future__ import annotations

import argparse
import threading

import pytest

from tools.chaos import report
from tools.chaos.__main__ import replay_options
from tools.chaos.faults import (
    Fault,
    FaultEvent,
    kill,
    pause,
    restart_broker,
    run_faults,
    server_down,
)
from tools.chaos.full_disk import full_disk
from tools.chaos.probes import BulkProbe, ProbeAnswer, answered_unavailable, unacknowledged
from tools.chaos.runner import _bound_from, _may_pair
from tools.chaos.workload import Created


def shard_restart() -> Fault:
    return server_down("restart shard db", "", lambda s: None, "postgres-b")


@pytest.mark.parametrize(
    ("first", "second", "allowed"),
    [
        (kill("executor-0"), shard_restart(), True),  # a worker kill during a shard restart
        (pause("scheduler-1"), kill("executor-0"), True),  # workers of different kinds
        (kill("executor-0"), pause("executor-0"), False),  # one process
        (kill("executor-0"), pause("executor-1"), False),  # every executor: none takes over
        (shard_restart(), shard_restart(), False),  # one server
        (restart_broker(), shard_restart(), True),
        (kill("api"), pause("api"), False),
        (full_disk("postgres-b"), kill("api"), False),  # its check asks the API
        (full_disk("postgres-b"), kill("executor-0"), True),
    ],
)
def test_two_faults_run_at_once_only_on_different_processes_and_servers(first, second, allowed):
    assert _may_pair(first, second) is allowed


def test_a_check_that_takes_its_fault_s_hold_does_not_hold_up_another_fault_s_heal():
    restarted = threading.Event()
    seen_during_the_check: list[bool] = []

    def other_server_back(system, observers, injected_at):
        seen_during_the_check.append(restarted.wait(timeout=10))
        return []

    def fault(name: str, **fields) -> Fault:
        return Fault(name=name, what="", inject=lambda s: None, **fields)

    full_disk = fault("full disk", heal=lambda s: None, hold=0.2, during=other_server_back)
    restart = fault("restart", heal=lambda s: restarted.set(), hold=0.1)

    event = run_faults([full_disk, restart], system=None, observers=object())

    assert seen_during_the_check == [True]
    assert [part.fault for part in event.parts] == ["full disk", "restart"]


def test_a_compound_with_a_servers_fault_is_bounded_from_the_heal():
    worker = FaultEvent("kill executor-0", "", 0.0, 1.0, takeover=True)
    server = FaultEvent("restart shard db", "", 0.0, 2.0)

    assert _bound_from(worker) == "due"
    assert _bound_from(FaultEvent("both", "", 0.0, 2.0, parts=(worker, server))) == "heal"


def result(*, max_late: float | None = 2.0, checks: list[dict] | None = None) -> dict:
    tally = {"jobs": 10, "lost": 0, "duplicate": 0, "rerun": 0, "early": 0, "late": 0,
             "max_late_s": max_late, "over_bound": 0,
             "examples": {"lost": [], "duplicate": [], "early": [], "latest": "j"}}  # fmt: skip
    fault = {"fault": "cut executor-0 from shard db", "phase": "single", "held_s": 15.0,
             "bound_from": "due", "running_again_s": 1.0, "on_time_again_s": 0.0,
             "api_again_s": 0.0, "check": tally, "checks": checks or []}  # fmt: skip
    return {"seed": 1, "seconds": 60.0, "bound_s": 10.0, "indeterminate_creates": 0,
            "deliveries": 5, "total": tally, "before_faults": tally, "faults": [fault],
            "checks": [], "left_out": {}}  # fmt: skip


def test_a_fault_whose_latest_job_is_over_the_bound_fails_the_run():
    assert not report.failed(result(max_late=10.0))
    assert report.failed(result(max_late=10.1))
    assert "over the bound: cut executor-0 from shard db" in report.markdown(
        result(max_late=12.0), command="c"
    )


def test_a_failed_check_fails_the_run_and_is_named():
    failing = result(checks=[{"name": "bulk create: 503 within 10 s", "ok": False,
                              "detail": "no answer after 10.0 s (timed out)"}])  # fmt: skip

    assert report.failed(failing)
    assert "bulk create: 503 within 10 s: no answer after 10.0 s" in report.markdown(
        failing, command="c"
    )


def test_the_table_gives_the_maximum_lateness_per_fault_and_per_phase():
    text = report.markdown(result(max_late=3.25), command="c")

    assert "| due | 3.2 |" in text
    assert "single: 3.2 s (#1 cut executor-0 from shard db)" in text


@pytest.mark.parametrize(
    ("status", "seconds", "ok"),
    [
        (503, 2.0, True),
        (503, 10.5, False),
        (500, 1.0, False),
        (201, 0.5, False),
        (None, 10.0, False),
    ],
)
def test_a_bulk_create_during_a_fault_must_answer_503_in_time(status, seconds, ok):
    answer = ProbeAnswer(0, 0.0, status, seconds, jobs=0, error="timed out")

    assert answered_unavailable(answer, what="bulk create").ok is ok


def test_jobs_no_create_acknowledged_are_counted_per_request():
    probe = BulkProbe(api_url="http://127.0.0.1:1")
    probe.created = [Created("acked", 0, "default", 0.0, 0.0)]
    rows = {"acked": "chaos probe 0", "x": "chaos probe 1", "y": "chaos probe 1"}

    assert unacknowledged(rows, probe) == {1: 2}


def test_the_report_s_command_replays_every_option_that_shaped_the_run():
    args = argparse.Namespace(
        replicas=1, short=False, mixed=25, rate=40.0, burst=400, bound=10.0, only="",
        timing=["JOBSVC_SCHEDULER_QUEUED_TIMEOUT_SECONDS=60"],
    )  # fmt: skip

    assert replay_options(args) == [
        *("--replicas", "1", "--mixed", "25", "--rate", "40", "--burst", "400"),
        *("--timing", "JOBSVC_SCHEDULER_QUEUED_TIMEOUT_SECONDS=60"),
    ]
