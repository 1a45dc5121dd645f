"""Percentiles, the once-a-second line, and the end-of-run summary of the load generator.

Times are in seconds internally and printed in milliseconds. A percentile is the nearest
rank on the sorted values (p50 of 1..100 is 50, p99.9 of 1,000 values is the 999th).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

SUMMARY_PERCENTILES = (50.0, 99.0, 99.9)
HEADER_EVERY = 20  # lines between repeated column headers


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of already sorted values."""
    if not sorted_values:
        return None
    if not 0 < q <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {q}")
    # Rounded first: 99.9 / 100 * 1000 is 999.0000000000001 in binary floating point.
    rank = math.ceil(round(q / 100 * len(sorted_values), 9))
    return sorted_values[max(rank, 1) - 1]


def _label(q: float) -> str:
    return f"p{q:g}".replace(".", "_")


def distribution_ms(values: Sequence[float]) -> dict[str, float | None]:
    """p50, p99, p99.9 and max of values in seconds, in milliseconds (None when empty)."""
    ordered = sorted(values)
    result: dict[str, float | None] = {}
    for q in SUMMARY_PERCENTILES:
        value = percentile(ordered, q)
        result[f"{_label(q)}_ms"] = None if value is None else round(value * 1000, 1)
    result["max_ms"] = round(ordered[-1] * 1000, 1) if ordered else None
    return result


@dataclass(frozen=True)
class Second:
    """What one observation (about one second) saw."""

    t: int  # whole seconds since the run started
    created: int  # jobs the API acknowledged
    dispatched: int  # tracked jobs first seen dispatched
    executed: int  # tracked jobs first seen succeeded or failed
    backlog: int  # due, not finished, among the jobs of this run
    started_lateness: list[float] = field(default_factory=list)  # seconds, of the executed
    finished_lateness: list[float] = field(default_factory=list)
    errors: int = 0  # failed requests (non-2xx and connection errors)
    seconds: float = 1.0  # the time this observation covers

    def per_second(self, count: int) -> float:
        return count / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict:
        started = sorted(self.started_lateness)
        finished = sorted(self.finished_lateness)
        return {
            "t": self.t,
            "created_per_s": round(self.per_second(self.created), 1),
            "dispatched_per_s": round(self.per_second(self.dispatched), 1),
            "executed_per_s": round(self.per_second(self.executed), 1),
            "backlog": self.backlog,
            "started_p50_ms": _ms(percentile(started, 50)),
            "started_p99_ms": _ms(percentile(started, 99)),
            "finished_p50_ms": _ms(percentile(finished, 50)),
            "finished_p99_ms": _ms(percentile(finished, 99)),
            "errors": self.errors,
        }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


_COLUMNS = (
    ("t s", 5),
    ("created/s", 10),
    ("dispatched/s", 13),
    ("executed/s", 11),
    ("backlog", 9),
    ("started p50/p99 ms", 20),
    ("finished p50/p99 ms", 21),
    ("errors", 7),
)


def header() -> str:
    return "".join(name.rjust(width) for name, width in _COLUMNS)


def _pair(values: list[float]) -> str:
    ordered = sorted(values)
    if not ordered:
        return "-"
    return f"{percentile(ordered, 50) * 1000:,.0f} / {percentile(ordered, 99) * 1000:,.0f}"


def line(second: Second) -> str:
    """One observation as a row under ``header()``."""
    cells = (
        str(second.t),
        f"{second.per_second(second.created):,.0f}",
        f"{second.per_second(second.dispatched):,.0f}",
        f"{second.per_second(second.executed):,.0f}",
        f"{second.backlog:,}",
        _pair(second.started_lateness),
        _pair(second.finished_lateness),
        f"{second.errors:,}",
    )
    return "".join(cell.rjust(width) for cell, (_, width) in zip(cells, _COLUMNS, strict=True))


@dataclass
class Summary:
    """The whole run, as printed at the end and written by ``--json``."""

    config: dict
    seconds: float  # from the first request slot to the last observation
    creating_seconds: float  # while requests were being sent
    requests: int
    created: int
    dispatched: int
    statuses: dict[str, int]  # of the finished jobs: succeeded, failed, cancelled
    unfinished_due: int
    not_yet_due: int
    started_lateness: list[float]
    finished_lateness: list[float]
    request_latency: list[float]
    errors: dict[str, int]  # by kind: "HTTP 503", "connection", ...
    dropped_slots: int
    interrupted: bool
    series: list[dict]

    @property
    def executed(self) -> int:
        return self.statuses.get("succeeded", 0) + self.statuses.get("failed", 0)

    def as_dict(self) -> dict:
        return {
            "config": self.config,
            "interrupted": self.interrupted,
            "seconds": round(self.seconds, 2),
            "creating_seconds": round(self.creating_seconds, 2),
            "requests": self.requests,
            "created": self.created,
            "created_per_second": _rate(self.created, self.creating_seconds),
            "dispatched": self.dispatched,
            "executed": self.executed,
            "executed_per_second": _rate(self.executed, self.seconds),
            "statuses": self.statuses,
            "unfinished": {"due": self.unfinished_due, "not_yet_due": self.not_yet_due},
            "lateness": {
                "started_minus_execute_at": distribution_ms(self.started_lateness),
                "finished_minus_execute_at": distribution_ms(self.finished_lateness),
            },
            "request_latency": distribution_ms(self.request_latency),
            "errors": {"total": sum(self.errors.values()), "by_kind": self.errors},
            "dropped_slots": self.dropped_slots,
            "series": self.series,
        }

    def text(self) -> str:
        data = self.as_dict()
        started = data["lateness"]["started_minus_execute_at"]
        finished = data["lateness"]["finished_minus_execute_at"]
        request = data["request_latency"]
        errors = data["errors"]
        lines = [
            f"summary{' (interrupted)' if self.interrupted else ''}: {self.seconds:.1f} s, "
            f"{self.requests:,} requests",
            f"  created    {self.created:,} ({data['created_per_second']:,}/s over "
            f"{self.creating_seconds:.1f} s)",
            f"  executed   {self.executed:,} ({data['executed_per_second']:,}/s over "
            f"{self.seconds:.1f} s); statuses {self.statuses or {}}",
            f"  unfinished {self.unfinished_due:,} due but not seen finished, "
            f"{self.not_yet_due:,} not yet due",
            f"  lateness started - execute_at   {_distribution_text(started)}",
            f"  lateness finished - execute_at  {_distribution_text(finished)}",
            f"  request latency                 {_distribution_text(request)}",
            f"  errors     {errors['total']:,} {errors['by_kind'] or ''}".rstrip(),
        ]
        if self.dropped_slots:
            lines.append(
                f"  behind     {self.dropped_slots:,} request slots dropped: the API or "
                "--concurrency could not keep up with --rate"
            )
        return "\n".join(lines)


def _distribution_text(values: dict[str, float | None]) -> str:
    if values["max_ms"] is None:
        return "-"
    parts = [
        f"{name.removesuffix('_ms').replace('_', '.')} {value:,.1f}"
        for name, value in values.items()
    ]
    return "  ".join(parts) + " ms"


def _rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1) if seconds > 0 else 0.0
