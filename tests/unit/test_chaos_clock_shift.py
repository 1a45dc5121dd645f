"""The clock skew shim (tools/chaos/clock_shift.c): under LD_PRELOAD it moves a process's
wall clock by the seconds it is given, and leaves its monotonic clock alone, on which
Python's sleeps and timeouts run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tools.chaos import clock_skew

READ_CLOCKS = (
    "import datetime, json, time; print(json.dumps({'time': time.time(), "
    "'datetime': datetime.datetime.now(datetime.UTC).timestamp(), "
    "'monotonic': time.monotonic()}))"
)
READ_LIBC_CLOCKS = """
import ctypes, json
class Timeval(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("usec", ctypes.c_long)]
libc = ctypes.CDLL(None)
libc.time.restype = ctypes.c_long
tv = Timeval()
libc.gettimeofday(ctypes.byref(tv), None)
print(json.dumps({"time": libc.time(None), "gettimeofday": tv.sec + tv.usec / 1e6,
                  "monotonic": 0}))
"""
SLACK = 0.5  # seconds: the child's start between our two readings, on a busy machine

pytestmark = pytest.mark.skipif(clock_skew.available() is not None, reason="needs gcc")


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    return clock_skew.build_shim(tmp_path_factory.mktemp("shim"))


def clocks_of_a_child(
    env: dict[str, str], *, script: str = READ_CLOCKS
) -> tuple[dict, float, float, float, float]:
    """The child's readings, and ours (wall, monotonic) just before and after it ran."""
    wall_before, monotonic_before = time.time(), time.monotonic()
    output = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(output), wall_before, time.time(), monotonic_before, time.monotonic()


@pytest.mark.parametrize("seconds", [3.0, -3.0, 0.25])
def test_the_wall_clock_is_shifted_and_the_monotonic_clock_is_not(shim, seconds):
    child, wall_before, wall_after, mono_before, mono_after = clocks_of_a_child(
        clock_skew.shifted_env(shim, seconds)
    )

    for wall in (child["time"], child["datetime"]):
        assert wall_before + seconds <= wall <= wall_after + seconds + SLACK
    assert mono_before <= child["monotonic"] <= mono_after


def test_without_the_variable_the_shim_shifts_nothing(shim):
    child, wall_before, wall_after, _, _ = clocks_of_a_child({"LD_PRELOAD": str(shim)})

    assert wall_before <= child["time"] <= wall_after


def test_time_and_gettimeofday_are_shifted_as_well(shim):
    """What C code reads besides clock_gettime (the C library's `time()` and
    `gettimeofday()`) moves with it."""
    child, wall_before, wall_after, _, _ = clocks_of_a_child(
        clock_skew.shifted_env(shim, -3600.0), script=READ_LIBC_CLOCKS
    )

    assert int(wall_before) - 3600 <= child["time"] <= wall_after - 3600 + SLACK
    assert wall_before - 3600 <= child["gettimeofday"] <= wall_after - 3600 + SLACK
