"""Waiting for a condition with a deadline: the only way tests wait for other processes."""

from __future__ import annotations

import time
from collections.abc import Callable

POLL_INTERVAL = 0.02  # seconds between checks of a condition awaited with a deadline


def wait_until(predicate: Callable[[], object], *, timeout: float, what: str) -> float:
    """Poll ``predicate`` until it is true; return the seconds it took, fail after ``timeout``."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not true within {timeout} s: {what}")
        time.sleep(POLL_INTERVAL)
    return time.monotonic() - started
