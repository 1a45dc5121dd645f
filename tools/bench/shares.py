"""Users' shares of started (or dispatched) jobs per 1-second window, and Jain's index.

Pure functions of timestamps (seconds since the epoch), no servers: the fairness
benchmarks (``tools/bench/fairness.py``, ``tools/bench/dispatch.py``) and the end-to-end
fairness test (``tests/e2e/test_fairness_end_to_end.py``) measure with the same code.

A user is *backlogged* from the first start of anyone's job until it started its own last
job; the backlogged windows are the whole seconds in which every user still was.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

User = TypeVar("User", bound=Hashable)


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of sorted values (q in 0-100)."""
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 when all values are equal, 1/n when one takes everything."""
    total = sum(values)
    squares = sum(v * v for v in values)
    return total * total / (len(values) * squares) if squares else math.nan


def per_second(starts: Mapping[User, Sequence[float]], *, since: float) -> dict[int, Counter]:
    """Started jobs per user in each 1-second window after ``since`` (window 0 begins there)."""
    windows: dict[int, Counter] = defaultdict(Counter)
    for user, times in starts.items():
        for t in times:
            windows[int(t - since)][user] += 1
    return windows


def backlogged_windows(starts: Mapping[User, Sequence[float]]) -> list[Counter]:
    """Started jobs per user in each whole second while every user still had jobs to start.

    From the first start of any job to the first user's last start; the partial second at
    the end is dropped.
    """
    first = min(min(times) for times in starts.values())
    backlogged_until = min(max(times) for times in starts.values())
    windows = per_second(starts, since=first)
    return [windows[second] for second in range(int(backlogged_until - first))]


def last_backlogged_second(starts: Mapping[User, Sequence[float]]) -> Counter:
    """Started jobs per user in the last second before the first user's last start.

    Every user still had jobs to start all through it, wherever the whole-second windows
    fall: it is where a user that runs out of jobs in one executor before the other shows
    (its share falls while its last jobs wait in the slower one), and a window counted
    from the first start may end just before that, or span it.
    """
    backlogged_until = min(max(times) for times in starts.values())
    return Counter(
        {
            user: sum(1 for t in times if backlogged_until - 1.0 < t <= backlogged_until)
            for user, times in starts.items()
        }
    )


def shares(counts: Counter, users: Sequence[User]) -> dict[User, float]:
    """Each user's share of the jobs counted (0 for all when none were)."""
    total = sum(counts[user] for user in users)
    return {user: counts[user] / total if total else 0.0 for user in users}


def weighted_shares(weight_of: Mapping[User, float]) -> dict[User, float]:
    """Each user's fair share: its weight over the sum of the weights."""
    total = sum(weight_of.values())
    return {user: weight / total for user, weight in weight_of.items()}


def longest_gap(times: Sequence[float], *, since: float) -> float:
    """The longest time without a start, from ``since`` to the last of ``times``."""
    gaps = [b - a for a, b in itertools.pairwise([since, *sorted(times)])]
    return max(gaps, default=0.0)


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Population standard deviation over the mean (0 when all are equal)."""
    mean = statistics.fmean(values)
    return statistics.pstdev(values) / mean if mean else math.nan
