"""Each shard database's clock, as seen from this executor: due means due by the database.

A job's due time is the shard database's (``now()``, as the API and the schedulers use it).
This machine's clock may be off: an executor whose clock ran 3 s ahead would start jobs
3 s early if it held them by its own. So the executor measures each shard's offset (the
database's ``clock_timestamp()`` less the middle of this machine's round trip, keeping the
sample of the shortest round trip among the last few, as NTP does) and holds jobs until
they are due on the database's clock. The claim checks ``due_at <= now()`` in the database
as well, so an offset measured wrong can delay a start, never make it early.

An offset beyond ``max_offset`` is reported in the executor's readiness: the machine's
clock needs fixing, even though jobs still start on time. Measured on the prober's thread
(``executor_worker.shard_prober``), which alone keeps the samples; the loop's thread reads
only each shard's offset, set whole after every measurement.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

_SAMPLES = 8  # round trips remembered per shard; the shortest one's offset counts


@dataclass(frozen=True)
class ClockSample:
    offset: float  # seconds the database's clock is ahead of ours
    round_trip: float  # seconds the measurement took


class ShardClocks:
    def __init__(
        self,
        *,
        read_database_clock: Callable[[int], float],
        interval: float,
        max_offset: float,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``read_database_clock(shard_id)``: the shard database's clock now, in seconds
        since the epoch (raises on a database error)."""
        self._read = read_database_clock
        self.interval = interval  # seconds between measurements of one shard
        self.max_offset = max_offset
        self._clock = clock
        self._monotonic = monotonic
        self._samples: dict[int, deque[ClockSample]] = {}
        self._offsets: dict[int, float] = {}  # per shard: its shortest round trip's offset
        self._next: dict[int, float] = {}

    def offset(self, shard_id: int) -> float:
        """Seconds the shard's clock is ahead of ours (0 until measured)."""
        return self._offsets.get(shard_id, 0.0)

    def due_time(self, shard_id: int, due_at: float) -> float:
        """When something due at ``due_at`` on the shard's clock is due on ours."""
        return due_at - self.offset(shard_id)

    def measure_due(self, shard_ids: list[int]) -> None:
        """Measure the shards not measured for ``interval`` seconds; a shard whose
        database fails is tried again at the next interval."""
        now = self._monotonic()
        for shard_id in shard_ids:
            if now < self._next.get(shard_id, 0.0):
                continue
            self._next[shard_id] = now + self.interval
            try:
                self.measure(shard_id)
            except Exception:  # reported by ``read_database_clock``; a clock can wait
                continue

    def measure(self, shard_id: int) -> None:
        before = self._clock()
        database = self._read(shard_id)
        after = self._clock()
        sample = ClockSample(offset=database - (before + after) / 2, round_trip=after - before)
        samples = self._samples.setdefault(shard_id, deque(maxlen=_SAMPLES))
        samples.append(sample)
        self._offsets[shard_id] = min(samples, key=lambda s: s.round_trip).offset

    def problems(self) -> list[str]:
        """Shards whose clock is off from ours by more than ``max_offset``."""
        return [
            f"clock {self.offset(shard):+.1f} s off shard {shard}'s database (over "
            f"{self.max_offset:g} s: fix this machine's clock; jobs still start on time)"
            for shard in sorted(self._offsets)
            if abs(self.offset(shard)) > self.max_offset
        ]
