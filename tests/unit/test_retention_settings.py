"""Retention settings that contradict each other stop the process at start-up."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tools.bench.processes import REPO


def _load_settings(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "import jobsvc.settings as s; print(s.JOB_RETENTION)"],
        cwd=REPO,
        env={"PATH": os.environ["PATH"], "JOBSVC_DEBUG": "true", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_finished_jobs_must_outlive_the_idempotency_keys_that_name_them():
    loaded = _load_settings(JOBSVC_JOB_RETENTION_DAYS="0.5", JOBSVC_IDEMPOTENCY_KEY_TTL_HOURS="24")

    assert loaded.returncode != 0
    assert "JOBSVC_JOB_RETENTION_DAYS" in loaded.stderr


@pytest.mark.parametrize(("days", "shown"), [("0", "0:00:00"), ("1", "1 day, 0:00:00")])
def test_zero_and_a_retention_covering_the_key_ttl_are_accepted(days, shown):
    loaded = _load_settings(JOBSVC_JOB_RETENTION_DAYS=days, JOBSVC_IDEMPOTENCY_KEY_TTL_HOURS="24")

    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == shown
