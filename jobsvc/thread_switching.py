"""How long a worker's thread may keep CPython's GIL while another thread waits for it.

A thread that wants the GIL waits up to the switch interval (5 ms by default) before it
asks the holder to drop it. A worker's threads that wait for rare, urgent work (an
executor's express runner, a scheduler's due listeners) wake from I/O while the main
thread holds the GIL for long stretches (decoding thousands of messages, building a
round of a thousand jobs): each of their wake-ups (a poll's return, each round trip of a
claim) waited up to that long, and a job created due now passes a dozen of them in two
processes. ``set_switch_interval`` is called once a worker has started; the workers' main
threads lose a little to the more frequent switches. Measured end to end in
tools/bench/results/2026-11-26/20-read-budget.md.
"""

from __future__ import annotations

import sys


def set_switch_interval(seconds: float) -> None:
    """Let a waiting thread take the GIL after ``seconds`` (0: Python's own, 5 ms)."""
    if seconds > 0:
        sys.setswitchinterval(seconds)
