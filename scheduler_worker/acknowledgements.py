"""A dispatcher's messages the broker has yet to acknowledge, and the jobs it failed.

The dispatcher sends a round's messages without waiting for the broker (see
``scheduler_worker.shard_publisher``): the broker's delivery reports arrive later, on the
producer's thread. ``Unacknowledged`` counts the messages still awaiting a report, so that
a dispatcher can wait for them before it lets its shard go, and keeps the jobs of failed
messages until the dispatch thread takes them to make them due again. It also knows
whether the broker *refuses*: it failed every message of its latest report.
"""

from __future__ import annotations

import threading


class Unacknowledged:
    """Counts and failed jobs (see the module's docstring); safe from both threads."""

    def __init__(self) -> None:
        self._count = 0
        self._failed: list[str] = []
        self._refused = False
        self._changed = threading.Condition()

    def add(self, count: int) -> None:
        with self._changed:
            self._count += count

    def report(self, job_ids: list[str], failed: list[int]) -> None:
        with self._changed:
            self._count -= len(job_ids)
            self._failed.extend(job_ids[i] for i in failed)
            if job_ids:
                self._refused = len(failed) == len(job_ids)
            self._changed.notify_all()

    @property
    def refused(self) -> bool:
        """The broker failed every message of its latest report (none acknowledged since)."""
        with self._changed:
            return self._refused

    @property
    def count(self) -> int:
        with self._changed:
            return self._count

    def take_failed(self) -> list[str]:
        with self._changed:
            failed, self._failed = self._failed, []
            return failed

    def put_back(self, failed: list[str]) -> None:
        with self._changed:
            self._failed.extend(failed)

    def wait_reported(self, timeout: float) -> bool:
        """Wait until the broker reported on every message sent; False if it timed out."""
        with self._changed:
            return self._changed.wait_for(lambda: self._count <= 0, timeout)
