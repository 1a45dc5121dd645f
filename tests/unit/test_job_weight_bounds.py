"""The bounds of job_weight: one rule, and settings that must lie within the hard bounds."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest

from jobsvc.accounts.weights import JOB_WEIGHT_CEILING, JOB_WEIGHT_FLOOR, job_weight_problem
from tools.bench.processes import REPO


@pytest.mark.parametrize(
    "value", [1e-300, 5e-324, 0, 0.0, -1, -0.5, 0.0009, 1000.5, math.inf, -math.inf, math.nan]
)
def test_a_weight_outside_the_bounds_or_not_finite_is_refused(value):
    assert job_weight_problem(value, minimum=0.001, maximum=1000) == (
        "Must be a finite number from 0.001 to 1000."
    )


@pytest.mark.parametrize("value", ["1", None, True, [1], {"w": 1}])
def test_a_weight_that_is_not_a_number_is_refused(value):
    assert job_weight_problem(value, minimum=0.001, maximum=1000) == "Must be a number."


def test_an_integer_too_large_for_a_float_is_refused_not_an_overflow():
    assert job_weight_problem(10**400, minimum=0.001, maximum=1000) is not None


@pytest.mark.parametrize("value", [0.001, 1, 2.5, 1000])
def test_a_weight_within_the_bounds_is_accepted(value):
    assert job_weight_problem(value, minimum=0.001, maximum=1000) is None


def _load_settings(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "import jobsvc.settings as s; print(s.MIN_JOB_WEIGHT)"],
        cwd=REPO,
        env={"PATH": os.environ["PATH"], "JOBSVC_DEBUG": "true", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"JOBSVC_MIN_JOB_WEIGHT": "1e-300"}, "JOBSVC_MIN_JOB_WEIGHT"),
        ({"JOBSVC_MIN_JOB_WEIGHT": "nan"}, "JOBSVC_MIN_JOB_WEIGHT"),
        ({"JOBSVC_MAX_JOB_WEIGHT": "inf"}, "JOBSVC_MAX_JOB_WEIGHT"),
        ({"JOBSVC_MAX_JOB_WEIGHT": str(JOB_WEIGHT_CEILING * 2)}, "JOBSVC_MAX_JOB_WEIGHT"),
        ({"JOBSVC_MIN_JOB_WEIGHT": "5", "JOBSVC_MAX_JOB_WEIGHT": "2"}, "JOBSVC_MIN_JOB_WEIGHT"),
        ({"JOBSVC_SELF_SERVICE_MAX_JOB_WEIGHT": "0.0001"}, "SELF_SERVICE"),
        ({"JOBSVC_SELF_SERVICE_MAX_JOB_WEIGHT": "5000"}, "SELF_SERVICE"),
    ],
)
def test_weight_settings_outside_the_hard_bounds_stop_the_process(env, named):
    loaded = _load_settings(**env)

    assert loaded.returncode != 0
    assert named in loaded.stderr


def test_the_default_minimum_is_the_hard_floor():
    loaded = _load_settings()

    assert loaded.returncode == 0, loaded.stderr
    assert float(loaded.stdout) == JOB_WEIGHT_FLOOR
