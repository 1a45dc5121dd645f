"""The workers' garbage collector settings: fewer collections, and cycles still freed."""

from __future__ import annotations

import gc
import weakref

import pytest

from jobsvc.gc_tuning import tune_garbage_collector


@pytest.fixture(autouse=True)
def _python_defaults_after():
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycles_left_alive(count: int) -> int:
    """Make ``count`` reference cycles and drop them; how many the collector left."""
    alive = weakref.WeakSet()
    for _ in range(count):
        first, second = _Node(), _Node()
        first.other, second.other = second, first
        alive.add(first)
    return len(alive)


def test_cyclic_garbage_is_still_collected_within_the_young_threshold():
    tune_garbage_collector(2_000)

    # Each cycle is two objects and their two dicts: 20,000 cycles are 80,000 allocations,
    # forty young collections' worth. Only those since the last collection may be left.
    assert _cycles_left_alive(20_000) <= 2_000


def test_start_up_objects_are_frozen_out_of_every_collection():
    tracked_before = len(gc.get_objects())

    tune_garbage_collector(50_000)

    assert gc.get_threshold()[0] == 50_000
    assert gc.get_freeze_count() >= tracked_before // 2
    assert len(gc.get_objects()) < tracked_before // 2  # what a full collection walks


def test_zero_leaves_python_s_collector_as_it_was():
    thresholds = gc.get_threshold()
    frozen = gc.get_freeze_count()

    tune_garbage_collector(0)

    assert gc.get_threshold() == thresholds
    assert gc.get_freeze_count() == frozen
