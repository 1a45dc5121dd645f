"""The workers' GIL switch interval: what the setting says, or Python's own at 0."""

from __future__ import annotations

import sys

import pytest

from jobsvc.thread_switching import set_switch_interval


@pytest.fixture(autouse=True)
def _python_default_after():
    interval = sys.getswitchinterval()
    yield
    sys.setswitchinterval(interval)


def test_a_waiting_thread_takes_the_gil_after_the_interval_set():
    set_switch_interval(0.001)
    assert sys.getswitchinterval() == pytest.approx(0.001)


def test_zero_leaves_pythons_own_interval():
    before = sys.getswitchinterval()
    set_switch_interval(0.0)
    assert sys.getswitchinterval() == before
