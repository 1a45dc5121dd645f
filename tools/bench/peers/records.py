"""When each job started, as the peers' no-op tasks record it, and the two measures.

Standard library only: the peers' worker processes import it from their own venv. A
task's body is one ``StartLog.record(due)``: a line ``<start> <due or ->`` (Unix seconds)
appended to its process's file in the directory ``$PEERS_RECORD_DIR`` names, flushed at
once (a write call of ~30 bytes, small beside any queue's cost per job), so the bench can
count the lines while the workers run.

The measures are the same for jobsvc (its ``started_at`` and ``execute_at``) and the peers:

- ``drain_numbers``: jobs over the time from the first start to the last;
- ``lateness_numbers``: percentiles of start - due, in milliseconds;
- ``censored_lateness``: the same when some jobs had not started by the end of the wait,
  each of those counted as starting then: the percentiles become lower bounds.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

RECORD_DIR_ENV = "PEERS_RECORD_DIR"


class StartLog:
    """One worker process's record of the jobs it started: opened lazily (after a fork),
    safe to call from a pool's threads."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._file = None
        self._pid = 0
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls) -> StartLog:
        return cls(Path(os.environ[RECORD_DIR_ENV]))

    def record(self, due: float | None) -> None:
        started = time.time()
        line = f"{started:.6f} {'-' if due is None else f'{due:.6f}'}\n"
        with self._lock:
            if self._file is None or self._pid != os.getpid():
                self._pid = os.getpid()
                self._file = open(  # noqa: SIM115 (open for the process's life)
                    self._directory / f"starts-{self._pid}.txt", "a", buffering=1
                )
            self._file.write(line)


def count_starts(directory: Path) -> int:
    """Lines recorded so far, over every worker's file."""
    return sum(path.read_bytes().count(b"\n") for path in directory.glob("starts-*.txt"))


def read_starts(directory: Path) -> list[tuple[float, float | None]]:
    """Every ``(start, due)`` recorded, from every worker's file."""
    starts = []
    for path in sorted(directory.glob("starts-*.txt")):
        for line in path.read_text().splitlines():
            started, due = line.split()
            starts.append((float(started), None if due == "-" else float(due)))
    return starts


def _percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest rank (q in 0-100) of sorted values."""
    rank = max(1, math.ceil(round(q / 100 * len(ordered), 9)))
    return ordered[rank - 1]


def drain_numbers(starts: Iterable[float]) -> dict:
    """Jobs, the seconds from the first start to the last, and jobs over those seconds."""
    ordered = sorted(starts)
    if len(ordered) < 2:
        return {"jobs": len(ordered), "seconds": None, "jobs_per_second": None}
    seconds = ordered[-1] - ordered[0]
    return {
        "jobs": len(ordered),
        "seconds": round(seconds, 3),
        "jobs_per_second": round(len(ordered) / seconds) if seconds > 0 else None,
    }


def lateness_numbers(pairs: Iterable[tuple[float, float]]) -> dict:
    """start - due of ``(start, due)`` pairs: p50, p99, max and min in ms."""
    late = sorted(1000 * (start - due) for start, due in pairs)
    if not late:
        return {"jobs": 0, "p50_ms": None, "p99_ms": None, "max_ms": None, "min_ms": None}
    return {
        "jobs": len(late),
        "p50_ms": round(_percentile(late, 50), 1),
        "p99_ms": round(_percentile(late, 99), 1),
        "max_ms": round(late[-1], 1),
        "min_ms": round(late[0], 1),  # below 0: a job started before it was due
    }


def censored_lateness(
    pairs: Iterable[tuple[float, float]], dues: Iterable[float], *, now: float
) -> dict:
    """``lateness_numbers`` of the ``(start, due)`` pairs and of every one of ``dues`` that
    did not start, as if it started ``now`` (a lower bound on its lateness); ``unstarted``
    counts those. A due time is matched to a start by its microseconds, as recorded."""
    pairs = list(pairs)
    started = {f"{due:.6f}" for _, due in pairs}
    missing = [due for due in dues if f"{due:.6f}" not in started]
    return lateness_numbers([*pairs, *((now, due) for due in missing)]) | {
        "unstarted": len(missing)
    }
