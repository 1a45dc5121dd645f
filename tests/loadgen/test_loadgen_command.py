"""`python -m tools.loadgen` against a served API and real workers: a few seconds of load."""

from __future__ import annotations

import json

import pytest

from jobsvc.accounts.models import User
from tools.loadgen.__main__ import main as loadgen

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)


def test_loadgen_creates_through_the_api_and_sees_every_job_executed(
    served_api, start_worker, tmp_path
):
    start_worker("scheduler", "scheduler-a")
    start_worker("executor", "executor-a")
    summary_path = tmp_path / "summary.json"
    printed: list[str] = []

    code = loadgen(
        [
            *("--api", served_api, "--users", "2", "--weights", "1,3", "--rate", "100"),
            *("--bulk", "5", "--duration", "3", "--drain", "30", "--json", str(summary_path)),
        ],
        write=printed.append,
    )

    assert code == 0
    summary = json.loads(summary_path.read_text())
    assert summary["created"] == 300
    assert summary["executed"] == 300
    assert summary["statuses"] == {"succeeded": 300}
    assert summary["unfinished"] == {"due": 0, "not_yet_due": 0}
    assert summary["errors"]["total"] == 0
    assert summary["lateness"]["started_minus_execute_at"]["max_ms"] >= 0
    # A weight above the self-service cap: the users were made through the ORM.
    weights = User.objects.filter(username__startswith="loadgen-").values_list(
        "job_weight", flat=True
    )
    assert sorted(weights) == [1.0, 3.0]
    assert any("created/s" in line for line in printed)
    assert any("summary:" in line for line in printed)
