"""Python's cyclic garbage collector, tuned for the long-running processes: the workers and
the API's.

CPython runs a young collection once container objects allocated (less those freed) pass
700, and a full collection, which traverses every tracked object, after ten middle ones
if the objects that survived have grown by a quarter since the last. A worker under a
flood allocates for every job and holds tens of thousands of messages at a time (an
executor's read-ahead), so full collections come every few seconds, and each walks all
of those and everything start-up created. Traced in one 1:2:4 bench run (tools/bench
fairness_end_to_end, 90,000 jobs in about 6 s), each executor made 3 full collections of
66-136 ms while the jobs ran (and about 500 smaller ones, 210 ms together), each
scheduler 2 of 79-112 ms; they found 0-29 objects of garbage. For that long the process
ran nothing else (a collection holds the GIL), in the middle of a turn or a dispatch
round.

``tune_garbage_collector`` is called once a process has started (a worker's command, and
each API process as it imports jobsvc.wsgi):

- what start-up created (modules, settings, Django's registries: about 92,000 objects
  that live as long as the process) is frozen: no collection traverses it again
  (``gc.freeze``);
- the young generation is collected after ``young_threshold`` allocations instead of
  700, so most of a job's objects are freed by reference counting before a collection
  sees them, and few survive to make a full collection due. Cycles are still collected,
  a little later: at most about that many objects wait for it.

In a run of the same scenario with both, each executor made one young collection (12-29
ms) while the jobs ran and each scheduler none. Measured end to end in
tools/bench/results/2026-11-25/17-garbage-collector.md.
"""

from __future__ import annotations

import gc


def tune_garbage_collector(young_threshold: int) -> None:
    """Freeze what exists now and collect the young generation every ``young_threshold``
    allocations (0: leave the collector as Python set it)."""
    if young_threshold <= 0:
        return
    gc.collect()  # what start-up left as garbage goes now, not frozen with the rest
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, oldest)
