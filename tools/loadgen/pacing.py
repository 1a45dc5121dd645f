"""Open-loop pacing: request start times that add up to a target rate, shared by threads.

The schedule is fixed in advance (request ``n`` is due at ``start + n * interval``), so a
late wake-up does not shift the requests after it. A sender that falls behind (the API is
slower than the target) does not make up for it with a burst: missed slots are dropped,
and the created/s line shows the rate actually reached.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

# How far behind schedule a slot may still be handed out: senders catch up on a short
# stall (the API's workers warming up, a GC pause) with at most a second's worth of
# requests; slots older than that are dropped, so a long stall is not followed by a flood.
MAX_LAG_SECONDS = 1.0


@dataclass(frozen=True)
class Slot:
    at: float  # when to send, on the pacer's clock
    sequence: int  # 0, 1, 2, ... in slot order (used to cycle over users)


class Pacer:
    """Hands out request slots ``interval`` seconds apart, until ``end`` (exclusive)."""

    def __init__(
        self, *, interval: float, start: float, end: float, clock: Callable[[], float]
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self.interval = interval
        self.start = start
        self.end = end
        self._clock = clock
        self._index = 0  # the next slot's place in the schedule, dropped slots included
        self._sequence = 0  # slots handed out
        self._dropped = 0
        self._lock = threading.Lock()

    @classmethod
    def for_rate(
        cls,
        *,
        jobs_per_second: float,
        jobs_per_request: int,
        start: float,
        duration: float,
        clock: Callable[[], float],
    ) -> Pacer:
        return cls(
            interval=jobs_per_request / jobs_per_second,
            start=start,
            end=start + duration,
            clock=clock,
        )

    def next_slot(self) -> Slot | None:
        """The next slot, or None once the schedule has reached ``end``."""
        with self._lock:
            oldest_allowed = self._clock() - MAX_LAG_SECONDS
            if self._at(self._index) < oldest_allowed:
                first_kept = max(
                    self._index, math.ceil((oldest_allowed - self.start) / self.interval)
                )
                self._dropped += first_kept - self._index
                self._index = first_kept
            at = self._at(self._index)
            if at >= self.end:
                return None
            slot = Slot(at=at, sequence=self._sequence)
            self._index += 1
            self._sequence += 1
            return slot

    def _at(self, index: int) -> float:
        # From the start each time: adding the interval up would drift.
        return self.start + index * self.interval

    @property
    def dropped(self) -> int:
        """Slots skipped because every sender was busy when they came due."""
        with self._lock:
            return self._dropped
