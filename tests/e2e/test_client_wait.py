"""The client waits for a job the real workers run, through the API served by gunicorn."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from jobsvc_client import Client, WaitTimeout
from tests.conftest import DEFAULT_PASSWORD
from tests.served_api import serving_api
from tools.bench.processes import REPO

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)


def test_waiting_returns_the_job_once_the_workers_ran_it(make_user, start_worker, tmp_path):
    user = make_user()
    start_worker("scheduler", "scheduler-a")
    start_worker("executor", "executor-a")
    with serving_api() as base:
        client = Client(base)
        client.login(username=user.username, password=DEFAULT_PASSWORD)
        job = client.create_job(message="Hello world", execute_at=datetime.now(UTC))
        later = client.create_job(
            message="later", execute_at=datetime.now(UTC) + timedelta(hours=1)
        )

        done = client.wait(job.id, timeout=30, poll_interval=0.1)
        with pytest.raises(WaitTimeout):
            client.wait(later.id, timeout=0.3, poll_interval=0.1)

        token_file = tmp_path / "token.json"
        env = {**os.environ, "JOBSVC_TOKEN_FILE": str(token_file)}
        cli = [sys.executable, "-m", "jobsvc_client"]
        subprocess.run(
            [*cli, "--url", base, "login", "--username", user.username, "--password-stdin"],
            input=DEFAULT_PASSWORD + "\n",
            text=True,
            env=env,
            cwd=REPO,
            check=True,
            timeout=60,
        )
        cli_job = client.create_job(message="waited for by the CLI", execute_at=datetime.now(UTC))
        waited = subprocess.run(
            [*cli, "jobs", "wait", cli_job.id, "--timeout", "30"],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=60,
        )

    assert done.status == "succeeded"
    assert done.attempts == 1
    assert done.finished_at is not None
    assert waited.returncode == 0, waited.stderr
    assert '"status": "succeeded"' in waited.stdout
