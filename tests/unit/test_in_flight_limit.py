"""The in-flight limit that follows the age of the shard's oldest queued job."""

from __future__ import annotations

import pytest

from scheduler_worker.in_flight import InFlightLimit
from tests.fake_clock import FakeClock


def limit(clock: FakeClock, **overrides) -> InFlightLimit:
    options = {"ceiling": 5000, "floor": 500, "target_wait": 0.2, "step": 250, "clock": clock}
    return InFlightLimit(**{**options, **overrides})


def test_it_starts_at_the_ceiling_and_stays_there_while_the_queue_is_young():
    clock = FakeClock()
    adaptive = limit(clock)

    for _ in range(100):
        clock.now += 0.05
        assert adaptive.update(oldest_queued_age=0.01) == 5000
    assert adaptive.update(oldest_queued_age=None) == 5000


def test_an_old_queue_shrinks_it_at_most_once_per_target_wait_down_to_the_floor():
    clock = FakeClock()
    adaptive = limit(clock)

    assert adaptive.update(oldest_queued_age=1.0) == 4000
    clock.now += 0.05
    assert adaptive.update(oldest_queued_age=1.0) == 4000  # the last cut needs time to show
    seen = []
    for _ in range(40):
        clock.now += 0.2
        seen.append(adaptive.update(oldest_queued_age=1.0))
    assert seen == sorted(seen, reverse=True)
    assert seen[-1] == 500


def test_it_climbs_back_once_the_queue_is_young_again_and_holds_near_the_target():
    clock = FakeClock()
    adaptive = limit(clock)
    for _ in range(20):
        clock.now += 0.2
        adaptive.update(oldest_queued_age=1.0)
    assert adaptive.limit == 500

    clock.now += 0.05
    assert adaptive.update(oldest_queued_age=0.15) == 500  # near the target: held
    clock.now += 0.05
    assert adaptive.update(oldest_queued_age=0.05) == 750  # young: one step up


@pytest.mark.parametrize(("floor", "ceiling"), [(0, 10), (11, 10)])
def test_a_floor_outside_the_ceiling_is_refused(floor, ceiling):
    with pytest.raises(ValueError, match="floor"):
        InFlightLimit(ceiling=ceiling, floor=floor, target_wait=0.2, step=1, clock=FakeClock())
