"""When to try a failing resource again: a shard database, the dead-letter topic.

Each key (a shard id, a topic) that failed is closed for a delay that doubles with every
failure in a row, from ``first_delay`` up to ``max_delay``; one success opens it again.
The work waiting for it is kept, so nothing is dropped, and a resource that is down costs
one attempt per delay rather than one per turn of the loop.

Who tries a key again: whoever waits for it, once ``is_open`` (the dead-letter topic), or a
prober, while the others use only keys ``answering`` (the executor's shards:
``executor_worker.shard_prober``). Safe from two threads at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass


@dataclass
class _Closed:
    failures: int
    until: float
    since: float  # when the first failure in a row happened


class ShardBackoff:
    def __init__(
        self, *, first_delay: float, max_delay: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not 0 < first_delay <= max_delay:
            raise ValueError(f"need 0 < first_delay <= max_delay, got {first_delay}, {max_delay}")
        self.first_delay = first_delay  # seconds closed after the first failure
        self.max_delay = max_delay  # seconds closed at most, however many failures
        self._clock = clock
        self._closed: dict[Hashable, _Closed] = {}
        self._succeeded_at: dict[Hashable, float] = {}
        self._lock = threading.Lock()

    def is_open(self, key: Hashable) -> bool:
        """It never failed, succeeded since, or its delay has passed: try it."""
        closed = self._closed.get(key)
        return closed is None or self._clock() >= closed.until

    def answering(self, key: Hashable) -> bool:
        """It has not failed since its last success (or ever)."""
        return key not in self._closed

    def now(self) -> float:
        return self._clock()

    def failed(self, key: Hashable, *, started_at: float | None = None) -> float:
        """Close the key after a failure; return for how many seconds. ``started_at``
        (this backoff's clock): when the failed attempt began. A first failure counts from
        then, so an attempt that hung until a timeout counts as failing all along."""
        now = self._clock()
        with self._lock:
            previous = self._closed.get(key)
            failures = previous.failures + 1 if previous else 1
            delay = min(self.max_delay, self.first_delay * 2 ** min(failures - 1, 60))
            first = now if started_at is None else min(started_at, now)
            since = previous.since if previous else first
            self._closed[key] = _Closed(failures=failures, until=now + delay, since=since)
        return delay

    def succeeded(self, key: Hashable) -> None:
        with self._lock:
            self._closed.pop(key, None)
            self._succeeded_at[key] = self._clock()

    def reached(self, within: float) -> set[Hashable]:
        """The keys that succeeded in the last ``within`` seconds and have not failed since."""
        since = self._clock() - within
        with self._lock:
            succeeded = list(self._succeeded_at.items())
        return {key for key, at in succeeded if at >= since and key not in self._closed}

    def failing_for(self) -> dict[Hashable, float]:
        """Seconds each key has failed in a row (since its first failure), by key."""
        now = self._clock()
        return {key: now - closed.since for key, closed in list(self._closed.items())}
