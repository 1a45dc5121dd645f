"""How many of a shard's jobs may be in flight at once: a limit that follows the queue.

A job published to Kafka waits behind every message already in its partition (FIFO), and
every executor reads all partitions, so a job that just became due waits about as long
as the oldest message still waiting, whoever it belongs to. A fixed cap per shard
(``JOBSVC_SCHEDULER_MAX_IN_FLIGHT_PER_SHARD``, 5,000) bounds that wait only by the rate:
four shards' 20,000 jobs at 16,000 jobs/s are 1.25 s, and seconds when executors are busy.

`InFlightLimit` keeps the wait near ``target_wait`` instead, by the delay it sees (as TCP
Vegas and LEDBAT do): the age of the shard's oldest *queued* job (published, not started
by an executor yet). Older than the target: the limit shrinks by ``DECREASE``, at most
once per ``target_wait`` (the queue needs that long to show the effect). Younger than
half the target: it grows by ``step`` per update, up to ``ceiling``. In between it holds.

Executors never starve for it: a queue older than the target is a queue, and while they
keep up, queued jobs are young and the limit climbs back to the ceiling. ``floor`` keeps a
round's worth of jobs in flight whatever the queue says.
"""

from __future__ import annotations

from collections.abc import Callable

DECREASE = 0.8  # factor applied to the limit when the queue is older than the target


class InFlightLimit:
    def __init__(
        self,
        *,
        ceiling: int,
        floor: int,
        target_wait: float,
        step: int,
        clock: Callable[[], float],
    ) -> None:
        if not 0 < floor <= ceiling:
            raise ValueError(f"need 0 < floor <= ceiling, got {floor} and {ceiling}")
        self.ceiling = ceiling
        self.floor = floor
        self.target_wait = target_wait  # seconds
        self.step = step  # jobs added per update while the queue is young
        self._clock = clock
        self.limit = ceiling
        self._last_decrease = float("-inf")

    def update(self, *, oldest_queued_age: float | None) -> int:
        """The limit now, given the age in seconds of the oldest queued job (None: none)."""
        now = self._clock()
        age = oldest_queued_age or 0.0
        if age > self.target_wait:
            if now - self._last_decrease >= self.target_wait:
                self.limit = max(self.floor, int(self.limit * DECREASE))
                self._last_decrease = now
        elif age < self.target_wait / 2:
            self.limit = min(self.ceiling, self.limit + self.step)
        return self.limit
