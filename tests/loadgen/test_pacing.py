"""Request pacing: slots a fixed interval apart, shared by threads, no catch-up floods."""

from __future__ import annotations

import pytest

from tests.fake_clock import FakeClock
from tools.loadgen.pacing import MAX_LAG_SECONDS, Pacer


def test_slots_are_one_request_interval_apart_for_the_target_rate():
    clock = FakeClock(100.0)
    pacer = Pacer.for_rate(
        jobs_per_second=500, jobs_per_request=10, start=100.0, duration=1.0, clock=clock
    )
    slots = []
    while (slot := pacer.next_slot()) is not None:
        slots.append(slot)
    # 500 jobs/s in requests of 10: 50 requests a second, 20 ms apart.
    assert len(slots) == 50
    assert [slot.sequence for slot in slots] == list(range(50))
    assert slots[1].at - slots[0].at == pytest.approx(0.02)
    assert slots[-1].at < 101.0
    assert pacer.dropped == 0


def test_a_late_wake_up_does_not_shift_the_schedule():
    clock = FakeClock(100.0)
    pacer = Pacer(interval=0.1, start=100.0, end=200.0, clock=clock)
    pacer.next_slot()
    clock.now = 100.15  # the sender overslept by 50 ms
    assert pacer.next_slot().at == pytest.approx(100.1)
    assert pacer.next_slot().at == pytest.approx(100.2)


def test_slots_missed_for_longer_than_the_lag_bound_are_dropped_not_bursted():
    clock = FakeClock(100.0)
    pacer = Pacer(interval=0.1, start=100.0, end=200.0, clock=clock)
    pacer.next_slot()
    clock.now = 100.1 + MAX_LAG_SECONDS + 2.0  # the API stalled for two seconds more
    slot = pacer.next_slot()
    assert clock.now - slot.at <= MAX_LAG_SECONDS + 0.1
    assert pacer.dropped == pytest.approx(20, abs=1)
    # Sequence numbers count slots handed out, so users keep taking turns.
    assert slot.sequence == 1


def test_no_slot_at_or_after_the_end():
    clock = FakeClock(100.0)
    pacer = Pacer(interval=1.0, start=100.0, end=102.0, clock=clock)
    assert [pacer.next_slot().at, pacer.next_slot().at] == [100.0, 101.0]
    assert pacer.next_slot() is None


def test_interval_must_be_positive():
    with pytest.raises(ValueError):
        Pacer(interval=0, start=0, end=1, clock=FakeClock(100.0))
