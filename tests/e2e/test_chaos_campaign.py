"""The fault campaign's short run: a few faults of each kind, on a replicated stack of its
own (`python -m tools.chaos --short --replicas 1 --burst 200 --only ...`; docs/chaos.md).

It starts its own servers because it restarts, kills, fills and promotes them; the test
stack of `make test` is not touched. What users rely on, under each fault: no
acknowledged job lost, no (job, attempt) delivered twice, none started before its
`execute_at` by the true clock, every job due during the fault started within the bound
(10 s from its due time under one worker's fault, from the later of due time and heal
otherwise), every shard running jobs again, and what a client was answered during the
fault (a bulk create touching an unreachable or full shard: 503, nothing created), and the
other shards going on while one server's host is gone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tools.bench.processes import REPO
from tools.chaos import clock_skew, disk, firewall

CAMPAIGN_TIMEOUT = 360  # seconds; the run takes about 2 minutes on 2 shared cores
STOP_TIMEOUT = 60  # seconds for a timed-out campaign to stop its stack
FAILOVER_RECOVERY_BOUND = 10.0  # seconds from the promotion until every shard runs jobs
NEEDS = firewall.available() or disk.available() or clock_skew.available()
FAULTS = [
    "restart shard db",
    "cut scheduler-0 from zookeeper",
    "cut scheduler-0 from broker",
    "cut api from shard db",
    "cut everyone from shard db",
    "skew executor-0 +3s",
    "fill shard db disk",
    "failover shard db",
]
# What a client is answered while a fault holds (bulk creates touching the faulted shards).
ANSWERED = ["cut api from shard db", "fill shard db disk"]
# With a fourth user's 200 jobs due at once every 5 s, both executors hold a backlog, also
# while one is paused or killed: no job may be lost or run twice for one attempt that way.
CAMPAIGN = [
    *(sys.executable, "-m", "tools.chaos", "--short", "--replicas", "1"),
    *("--rate", "15", "--burst", "200"),
]


def fault_names() -> list[str]:
    return [fault if isinstance(fault, str) else fault.values[0] for fault in FAULTS]


@dataclass(frozen=True)
class Campaign:
    result: dict
    report: str
    faults: dict[str, dict]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Campaign:
    if NEEDS:
        pytest.skip(NEEDS)
    tmp_path: Path = tmp_path_factory.mktemp("chaos")
    out, log = tmp_path / "chaos", tmp_path / "chaos.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [*CAMPAIGN, "--only", ",".join(fault_names()), "--out", str(out)],
            cwd=REPO,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            process.wait(timeout=CAMPAIGN_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.terminate()  # SIGTERM: the campaign stops its servers on the way out
            process.wait(timeout=STOP_TIMEOUT)
            raise
    assert (out / "results.json").exists(), log.read_text()[-5000:]
    result = json.loads((out / "results.json").read_text())
    return Campaign(
        result=result,
        report=(out / "report.md").read_text(),
        faults={fault["fault"]: fault for fault in result["faults"]},
    )


def test_every_fault_ran_and_every_shard_ran_jobs_again_after_each(campaign):
    assert set(campaign.faults) == set(fault_names()), campaign.report
    assert all(f["running_again_s"] is not None for f in campaign.faults.values()), campaign.report
    assert campaign.faults["failover shard db"]["running_again_s"] <= FAILOVER_RECOVERY_BOUND


def test_before_the_first_fault_nothing_is_lost_run_twice_or_early(campaign):
    before = campaign.result["before_faults"]

    assert [before["lost"], before["duplicate"], before["early"]] == [0, 0, 0], campaign.report
    assert campaign.result["checks"] and all(c["ok"] for c in campaign.result["checks"])


@pytest.mark.parametrize("name", FAULTS)
def test_under_the_fault_no_job_is_lost_run_twice_early_or_later_than_the_bound(campaign, name):
    check = campaign.faults[name]["check"]

    assert check["jobs"] > 0, campaign.report
    assert [check["lost"], check["duplicate"], check["early"]] == [0, 0, 0], campaign.report
    assert check["max_late_s"] <= campaign.result["bound_s"], check["examples"]["latest"]


@pytest.mark.parametrize("name", ANSWERED)
def test_a_bulk_create_touching_the_faulted_shards_answers_503_and_creates_nothing(campaign, name):
    checks = campaign.faults[name]["checks"]

    assert checks, campaign.report
    assert [c for c in checks if not c["ok"]] == []


def test_a_server_every_app_is_cut_off_from_holds_up_only_its_own_shards(campaign):
    checks = campaign.faults["cut everyone from shard db"]["checks"]

    assert checks and all(c["ok"] for c in checks), checks
