"""How fast this machine runs a fixed piece of Python: a yardstick between runs.

A shared VM's speed moves, from day to day and within seconds (the same scenario has
measured twice as fast on one day as on another on the benchmark machine), so a figure
is only comparable with one measured beside it. The suite times ``reference_ms`` at the
start and the end of every run and records both with the machine: two runs whose
references differ by much ran on different machines, as far as their figures are
concerned.

The work is the kind the stack does (building, serialising and sorting small records),
on one core, timed while no scenario runs; the median of a few repeats, so that a slow
VM shows (its cores stolen by neighbours) and one odd repeat does not.
"""

from __future__ import annotations

import json
import statistics
import time

REPEATS = 15  # about a second: a VM's speed can move by 2x within seconds
RECORDS = 20_000


def _work() -> None:
    records = [{"id": i, "user": i % 10, "payload": "x" * (i % 50)} for i in range(RECORDS)]
    json.loads(json.dumps(records))
    sorted(records, key=lambda record: (record["user"], -record["id"]))


def reference_ms(repeats: int = REPEATS) -> float:
    """Milliseconds the fixed work takes here, median of ``repeats`` (lower is faster)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        _work()
        times.append(time.perf_counter() - started)
    return round(statistics.median(times) * 1000, 1)


def described(machine: dict) -> str:
    """The references a run recorded, as a clause for its report ("" if it has none)."""
    start, end = machine.get("reference_ms_start"), machine.get("reference_ms_end")
    if start is None:
        return ""
    at_end = f" and {end} ms at the end" if end is not None else ""
    return f"; the yardstick (tools/bench/machine_speed.py) took {start} ms at the start{at_end}"
