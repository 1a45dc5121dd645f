"""The soak's arithmetic: per-minute lateness from histograms, per-minute levels of the
memory samples, and the pass/fail tests. Pure functions, no servers.

- Lateness comes from the shards as histograms (jobs per due minute and whole
  millisecond of ``started_at - execute_at``), merged over the shards; percentiles are
  nearest-rank on the merged counts, exact to the millisecond.
- A process's memory level in a minute is the mean of the samples taken in it.
- Memory *grows* when the least-squares slope of its levels from minute 2 to the last,
  times the minutes that span, exceeds ``GROWTH_TOLERANCE`` (10 %) of its mean level over
  them: a process that settles after minute 1 passes, one that climbs steadily fails.
- Lateness fails a minute whose p99 is over ``P99_LIMIT_MS``, or more than
  ``CREEP_LIMIT`` times minute 2's p99.
- How closely lateness follows the machine's load: the correlation of each minute's p99
  with the cores busy in it, reported, not tested. On a machine shared by the whole stack
  the tail of start - due is mostly time waiting for a core.
- Whether lateness drifted over the run, and whether the machine's speed did
  (``drift``): reported, not tested.
- Where the jobs that fail a minute were (``late_jobs``): those later than ``CREEP_LIMIT``
  times minute 2's p99, by due second, shard and partition. Reported, not tested: how
  much of them the worst ``BURST_SECONDS`` of the seconds hold, and how evenly the shards
  (databases) and partitions (executors) share them.
- The load is held when every minute's jobs were created at ``RATE_HELD`` of the rate or
  more: a minute the load generator fell behind in did not measure the design peak.

Minutes are counted from 1 in what the soak reports; the lists here are indexed from 0,
so "minute 2" is index 1.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from tools.bench.stack_cpu import StackCpu

P99_LIMIT_MS = 100.0  # every minute's p99 of started_at - execute_at, at most
CREEP_LIMIT = 1.5  # no minute's p99 above this times minute 2's
GROWTH_TOLERANCE = 0.10  # of the level: the most a process may grow over the run
WORKER_RSS_LIMIT_MIB = 150.0  # each scheduler and executor process, at its peak
RATE_HELD = 0.98  # of the rate: every minute's created/s at least this
REFERENCE_MINUTE = 1  # index of minute 2: the first after start-up
BURST_SECONDS = 0.02  # of the run's seconds: the worst ones, whose share of late jobs is told
LOADGEN = "loadgen"  # the load generator's share of the CPU (tools.bench.stack_cpu)


def merge_histograms(rows: Iterable[tuple[int, int, int]]) -> dict[int, dict[int, int]]:
    """``(minute, milliseconds, jobs)`` rows from every shard, as minute -> ms -> jobs."""
    merged: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for minute, ms, jobs in rows:
        merged[minute][ms] += jobs
    return {minute: dict(counts) for minute, counts in merged.items()}


def percentile_of_counts(counts: Mapping[int, int], q: float) -> int | None:
    """Nearest-rank ``q``-th percentile (0 < q <= 100) of values given as value -> count."""
    total = sum(counts.values())
    if total == 0:
        return None
    rank = max(1, math.ceil(round(q / 100 * total, 9)))
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if seen >= rank:
            return value
    raise AssertionError("unreachable: the rank is at most the total")


def minute_lateness(histograms: Mapping[int, Mapping[int, int]], minutes: int) -> list[dict]:
    """For each of ``minutes`` minutes: jobs, p50, p99 and max in ms (None when none)."""
    rows = []
    for minute in range(minutes):
        counts = histograms.get(minute, {})
        rows.append(
            {
                "jobs": sum(counts.values()),
                "p50_ms": percentile_of_counts(counts, 50),
                "p99_ms": percentile_of_counts(counts, 99),
                "max_ms": max(counts) if counts else None,
            }
        )
    return rows


def per_minute_rate(counts: Mapping[int, int], minutes: int) -> list[float]:
    """Events per second in each minute, from minute -> events."""
    return [round(counts.get(minute, 0) / 60, 1) for minute in range(minutes)]


def minute_levels(
    samples: Sequence[tuple[float, float]], *, start: float, minutes: int
) -> list[float | None]:
    """The mean of the ``(time, value)`` samples taken in each minute after ``start``."""
    buckets: dict[int, list[float]] = defaultdict(list)
    for at, value in samples:
        minute = math.floor((at - start) / 60)
        if 0 <= minute < minutes:
            buckets[minute].append(value)
    return [
        round(sum(buckets[m]) / len(buckets[m]), 1) if buckets.get(m) else None
        for m in range(minutes)
    ]


def least_squares_slope(points: Sequence[tuple[float, float]]) -> float:
    """The slope of the least-squares line through ``(x, y)`` points (0 for fewer than 2)."""
    if len(points) < 2:
        return 0.0
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def growth(levels: Sequence[float | None], *, tolerance: float = GROWTH_TOLERANCE) -> dict:
    """Whether the levels from minute 2 on grow: slope x span above ``tolerance`` x level.

    ``grows`` is None when fewer than two minutes from minute 2 on have a level."""
    points = [
        (float(minute), level)
        for minute, level in enumerate(levels)
        if minute >= REFERENCE_MINUTE and level is not None
    ]
    if len(points) < 2:
        return {"slope_per_minute": None, "growth": None, "level": None, "grows": None}
    slope = least_squares_slope(points)
    span = points[-1][0] - points[0][0]
    level = sum(y for _, y in points) / len(points)
    grown = slope * span
    return {
        "slope_per_minute": round(slope, 3),
        "growth": round(grown, 1),
        "level": round(level, 1),
        "grows": grown > tolerance * level,
    }


def rate_check(created_per_s: Sequence[float], rate: float) -> dict:
    """Whether every minute's creates kept up with ``rate`` (within ``RATE_HELD``)."""
    short = [
        minute + 1 for minute, created in enumerate(created_per_s) if created < RATE_HELD * rate
    ]
    return {"at_least": round(RATE_HELD * rate, 1), "minutes_short": short, "passed": not short}


def lateness_checks(minutes: Sequence[Mapping]) -> dict:
    """The lateness tests over the per-minute rows of ``minute_lateness``."""
    p99s = [row["p99_ms"] for row in minutes]
    over_limit = [n + 1 for n, p99 in enumerate(p99s) if p99 is None or p99 > P99_LIMIT_MS]
    reference = p99s[REFERENCE_MINUTE] if len(p99s) > REFERENCE_MINUTE else None
    bound = _creep_bound(reference)
    crept: list[int] | None = None
    if bound is not None:
        crept = [n + 1 for n, p99 in enumerate(p99s) if p99 is not None and p99 > bound]
    return {
        "p99_limit_ms": P99_LIMIT_MS,
        "minutes_over_limit": over_limit,
        "creep_limit": CREEP_LIMIT,
        "minute_2_p99_ms": reference,
        "minutes_crept": crept,
        "passed": not over_limit and crept == [],
    }


def creep_bound_ms(histograms: Mapping[int, Mapping[int, int]]) -> float | None:
    """The lateness over which a job counts against its minute's p99, from the histograms
    (``lateness_checks``'s bound; None without a minute 2)."""
    return _creep_bound(percentile_of_counts(histograms.get(REFERENCE_MINUTE, {}), 99))


def _creep_bound(reference: float | None) -> float | None:
    """``CREEP_LIMIT`` times minute 2's p99 (``reference``), and of 1 ms at least: under
    that, any noise would be a creep. None without a minute 2."""
    return None if reference is None else CREEP_LIMIT * max(reference, 1)


def late_jobs(rows: Iterable[tuple[int, int, int | None, int, int]], late_ms: float) -> dict:
    """Where the jobs later than ``late_ms`` were, from ``(due second, shard, partition,
    jobs, late jobs)`` rows: their share of the jobs, the share of them that the worst
    ``BURST_SECONDS`` of the seconds hold, and the least and the most late share (%) of any
    shard's jobs and of any partition's."""
    by_second: dict[int, int] = defaultdict(int)
    shards: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    partitions: dict[int | None, list[int]] = defaultdict(lambda: [0, 0])
    for second, shard, partition, jobs, late in rows:
        by_second[second] += late
        for totals in (shards[shard], partitions[partition]):
            totals[0] += jobs
            totals[1] += late
    late = sum(by_second.values())
    jobs = sum(total for total, _ in shards.values())
    worst = max(1, round(BURST_SECONDS * len(by_second)))
    in_worst = sum(sorted(by_second.values(), reverse=True)[:worst])
    return {
        "late_ms": late_ms,
        "late": late,
        "late_pct": round(100 * late / jobs, 2) if jobs else None,
        "seconds": len(by_second),
        "worst_seconds": worst,
        "in_worst_seconds": round(in_worst / late, 2) if late else None,
        "by_shard_pct": _spread(shards.values()),
        "by_partition_pct": _spread(partitions.values()),
    }


def _spread(totals: Iterable[list[int]]) -> list[float] | None:
    shares = [round(100 * late / jobs, 2) for jobs, late in totals if jobs]
    return [min(shares), max(shares)] if shares else None


def minute_rates(
    samples: Sequence[tuple[float, float]], *, start: float, minutes: int
) -> list[float | None]:
    """Per-second rate in each minute of a counter sampled as ``(time, total so far)``:
    its rise from the minute's first sample to its last over the time between them."""
    buckets: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for at, total in samples:
        minute = math.floor((at - start) / 60)
        if 0 <= minute < minutes:
            buckets[minute].append((at, total))
    rates: list[float | None] = []
    for minute in range(minutes):
        points = sorted(buckets.get(minute, []))
        if len(points) < 2 or points[-1][0] == points[0][0]:
            rates.append(None)
            continue
        (first_at, first), (last_at, last) = points[0], points[-1]
        rates.append(round((last - first) / (last_at - first_at), 2))
    return rates


def correlation(xs: Sequence[float | None], ys: Sequence[float | None]) -> float | None:
    """Pearson's r over the minutes where both are known (None for fewer than 3 such
    minutes, or when either does not vary)."""
    pairs = [(x, y) for x, y in zip(xs, ys, strict=False) if x is not None and y is not None]
    if len(pairs) < 3:
        return None
    try:
        return round(statistics.correlation(*zip(*pairs, strict=True)), 2)
    except statistics.StatisticsError:  # one of them is constant
        return None


def p99_follows_busy_cores(result: Mapping) -> float | None:
    """Pearson's r of a soak result's per-minute p99 lateness and the machine's busy cores
    in each minute (None without both)."""
    return correlation(_minute_p99s(result), result.get("cpu_cores", {}).get(StackCpu.MACHINE, []))


def later_over_earlier(levels: Sequence[float | None]) -> float | None:
    """The mean of the later half of the levels from minute 2 on over the mean of the
    earlier half (None for fewer than two such levels, or an earlier mean of 0)."""
    known = [level for level in levels[REFERENCE_MINUTE:] if level is not None]
    half = len(known) // 2
    earlier = statistics.mean(known[:half]) if half else 0
    if not earlier:
        return None
    return round(statistics.mean(known[half:]) / earlier, 2)


def drift(result: Mapping) -> dict:
    """Reported, not tested: how a soak's lateness and its machine's speed moved over it.

    ``p99_trend_ms``: the minutes' p99 lateness from minute 2 on, slope x span (as the
    memory growth test measures). ``loadgen_cpu``: the load generator's CPU in the later
    half of those minutes over the earlier half. It does the same work every minute and
    touches no table, so a change there is the machine's speed changing, not the work."""
    loadgen = result.get("cpu_cores", {}).get(LOADGEN, [])
    return {
        "p99_trend_ms": growth(_minute_p99s(result))["growth"],
        "loadgen_cpu": later_over_earlier(loadgen),
    }


def _minute_p99s(result: Mapping) -> list[float | None]:
    """Each minute's p99 of started - due, in ms."""
    return [row["p99_ms"] for row in result["per_minute"]["started_minus_due_ms"]]
