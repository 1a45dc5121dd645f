"""The prober asks the shards off the executor's loop: the answering ones for their clocks
every interval, a failed one again once its backoff allows, until it answers."""

from __future__ import annotations

from django.db import OperationalError

from executor_worker.shard_backoff import ShardBackoff
from executor_worker.shard_clocks import ShardClocks
from executor_worker.shard_prober import ShardProber
from tests.fake_clock import FakeClock

SHARDS = [0, 1]
INTERVAL = 2.0  # seconds between clock readings of a shard that answers
FIRST_DELAY = 0.2  # seconds before a failed shard is asked again


class Databases:
    """Shard databases that answer or not; each reading reports to the backoff as the
    executor's does (``ExecutorWorker._read_database_clock``)."""

    def __init__(self, shards: ShardBackoff, clock: FakeClock) -> None:
        self.down: set[int] = set()
        self.asked: list[int] = []
        self._shards = shards
        self._clock = clock

    def read_clock(self, shard: int) -> float:
        self.asked.append(shard)
        if shard in self.down:
            self._shards.failed(shard)
            raise OperationalError(f"shard {shard} does not answer")
        self._shards.succeeded(shard)
        return self._clock.now


def make_prober() -> tuple[ShardProber, Databases, ShardBackoff, FakeClock]:
    clock = FakeClock(1000.0)
    shards = ShardBackoff(first_delay=FIRST_DELAY, max_delay=5.0, clock=clock)
    databases = Databases(shards, clock)
    clocks = ShardClocks(
        read_database_clock=databases.read_clock,
        interval=INTERVAL,
        max_offset=1.0,
        clock=clock,
        monotonic=clock,
    )
    return (
        ShardProber(clocks=clocks, shards=shards, shard_ids=lambda: SHARDS),
        databases,
        shards,
        clock,
    )


def test_answering_shards_are_asked_once_per_interval():
    prober, databases, _, clock = make_prober()

    prober.probe_due()
    prober.probe_due()
    clock.now += INTERVAL
    prober.probe_due()

    assert databases.asked == SHARDS + SHARDS


def test_a_failed_shard_is_asked_again_once_its_backoff_allows_and_answers_again():
    prober, databases, shards, clock = make_prober()
    databases.down.add(1)
    shards.failed(1)  # a claim there failed, on the loop

    prober.probe_due()
    assert databases.asked == [0]  # not before its delay
    clock.now += FIRST_DELAY
    databases.asked.clear()
    prober.probe_due()
    assert databases.asked == [1] and not shards.answering(1)  # asked, still down

    databases.down.clear()
    clock.now += 2 * FIRST_DELAY
    prober.probe_due()
    assert shards.answering(1)
