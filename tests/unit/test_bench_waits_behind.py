"""The count of jobs due during a drain, as the flood benchmarks report it."""

from __future__ import annotations

import random

from tools.bench.fairness import FLOOD_LEFT, waits_behind


def test_due_during_counts_jobs_due_while_the_flood_had_enough_left_to_start():
    rng = random.Random(7)
    flood_starts = [rng.uniform(0.0, 10.0) for _ in range(FLOOD_LEFT * 3)]
    rows = [(due, due + 0.05, due - 0.5) for due in (rng.uniform(-1.0, 11.0) for _ in range(400))]

    naive = sum(1 for due, _, _ in rows if sum(1 for t in flood_starts if t > due) >= FLOOD_LEFT)

    assert waits_behind(rows, flood_starts)["due_during"] == naive
    assert 0 < naive < len(rows)  # some due before the last FLOOD_LEFT starts, some after


def test_no_job_is_due_during_a_flood_smaller_than_the_threshold():
    rows = [(0.0, 0.1, -0.9)]
    assert waits_behind(rows, [1.0] * (FLOOD_LEFT - 1))["due_during"] == 0
    assert waits_behind(rows, [1.0] * FLOOD_LEFT)["due_during"] == 1
