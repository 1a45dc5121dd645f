"""Messages read before their job is due, held until it is.

Schedulers publish a job up to ``JOBSVC_SCHEDULER_DISPATCH_AHEAD_SECONDS`` before its due
time, so that the trip through the scheduler's round, the broker and the executor's read
is made while the job waits anyway, not after it became due: under a flood each of those
stages queues for CPU, and together they took hundreds of milliseconds. The executor holds
such a message here, by due time, and lets it into the fair buffers the moment it is due;
from there it starts in weighted fair order like any other. A job is never started before
its due time by this executor's clock.

Not thread-safe: the executor's loop thread owns it. The clock is the caller's.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Generic, TypeVar

T = TypeVar("T")


class NotDueYet(Generic[T]):
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, T]] = []  # (due time, arrival, item)
        self._arrivals = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def put(self, due: float, item: T) -> None:
        """Hold ``item`` until ``due`` (a time on the caller's clock)."""
        heapq.heappush(self._heap, (due, next(self._arrivals), item))

    def release(self, now: float) -> list[T]:
        """The items due at ``now`` or before, earliest first; they leave."""
        released: list[T] = []
        while self._heap and self._heap[0][0] <= now:
            released.append(heapq.heappop(self._heap)[2])
        return released

    def next_due(self) -> float | None:
        """When the earliest held item is due; None when nothing is held."""
        return self._heap[0][0] if self._heap else None

    def clear(self) -> list[T]:
        """Everything held, in no particular order; nothing is held after."""
        items = [item for _, _, item in self._heap]
        self._heap = []
        return items
