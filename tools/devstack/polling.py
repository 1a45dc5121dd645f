"""Waiting for a condition with a deadline: how the launcher knows a server is ready."""

from __future__ import annotations

import time
from collections.abc import Callable

FIRST_INTERVAL = 0.02  # seconds before the second check; doubles up to MAX_INTERVAL
MAX_INTERVAL = 0.25  # seconds between checks once a server is slow to come up


def poll_until(
    check: Callable[[], bool],
    *,
    timeout: float,
    give_up: Callable[[], None] | None = None,
) -> bool:
    """Call `check` until it returns True (-> True) or `timeout` seconds pass (-> False).

    `give_up` runs between checks and raises when waiting can no longer succeed, for
    example because the server process has exited.
    """
    deadline = time.monotonic() + timeout
    interval = FIRST_INTERVAL
    while True:
        if check():
            return True
        if give_up is not None:
            give_up()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(interval, remaining))
        interval = min(interval * 2, MAX_INTERVAL)
