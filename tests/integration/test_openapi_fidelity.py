"""The OpenAPI schema says exactly what the API accepts: a short schemathesis run.

Schemathesis generates requests from /api/v1/schema/ (valid ones, and invalid ones
against each constraint) and sends them to the API served by gunicorn, with every check:
no 5xx, every schema-valid request accepted, every schema-violating one refused,
responses conforming to their declared shapes, stateful sequences following the links.
Rules a schema cannot state are applied by tests/integration/schemathesis_hooks.py, each
one written in its operation's description. A longer run (about 10,000 requests, 15-30
minutes): SCHEMATHESIS_MAX_EXAMPLES=700 SCHEMATHESIS_TIMEOUT_SECONDS=3000.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from tests.conftest import DEFAULT_PASSWORD
from tests.served_api import serving_api
from tools.bench.processes import REPO

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

MAX_EXAMPLES = os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "10")  # per operation and phase
SEED = os.environ.get("SCHEMATHESIS_SEED", "20261123")  # a fixed seed: a failure reproduces
TIMEOUT = float(os.environ.get("SCHEMATHESIS_TIMEOUT_SECONDS", "900"))  # for the whole run
# More options for schemathesis run, e.g. "--report har --report-dir /tmp/st" to keep every
# request and response.
EXTRA_ARGS = shlex.split(os.environ.get("SCHEMATHESIS_ARGS", ""))
# The stateful phase chains operations through the ids the API returns, so what it sends
# differs from run to run; make test runs the phases a seed fixes (a long run adds it:
# SCHEMATHESIS_PHASES=examples,coverage,fuzzing,stateful).
PHASES = os.environ.get("SCHEMATHESIS_PHASES", "examples,coverage,fuzzing")


def test_every_generated_request_is_answered_as_the_schema_says(make_user, tmp_path):
    user = make_user(is_staff=True)  # a staff token reaches every operation (redrive too)
    # Unthrottled (sign-up and log-in are called thousands of times), and no cached users:
    # a password change takes effect on every process at once, as the next cases need.
    with serving_api(env={"JOBSVC_AUTH_USER_CACHE_SECONDS": "0"}) as base:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "schemathesis.cli",
                "run",
                f"{base}/api/v1/schema/?format=json",
                "--checks",
                "all",
                "--max-examples",
                MAX_EXAMPLES,
                "--seed",
                SEED,
                "--generation-database",
                ":memory:",
                "--phases",
                PHASES,
                "--no-color",
                *EXTRA_ARGS,
            ],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={
                **os.environ,
                "PYTHONPATH": str(REPO),
                "SCHEMATHESIS_HOOKS": "tests.integration.schemathesis_hooks",
                "SCHEMATHESIS_USERNAME": user.username,  # the hooks mint its tokens
                "SCHEMATHESIS_PASSWORD": DEFAULT_PASSWORD,
                "DJANGO_SETTINGS_MODULE": "jobsvc.settings",
            },
            timeout=TIMEOUT,
        )

    summary = result.stdout[result.stdout.rfind("SUMMARY") :]
    print(summary)  # with -s: the operations, phases and number of generated test cases
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]
    # Warnings are not failures: e.g. "missing test data" for the operations on one job,
    # which answer 404 to the random (well-formed) ids that were never created.
    assert "Failures:" not in summary, summary
