"""Python's cyclic garbage collector, tuned for the long-running processes: the workers and
the API's.

Why: a full collection holds the GIL while it walks every tracked object, and a worker
under a flood allocates for every job and holds tens of thousands of messages, so with
CPython's defaults full collections of tens of milliseconds came every few seconds, in
the middle of a turn or a dispatch round, and found next to no garbage.

``tune_garbage_collector`` is called once a process has started (a worker's command, and
each API process as it imports jobsvc.wsgi):

- what start-up created (modules, settings, Django's registries: about 92,000 objects
  that live as long as the process) is frozen: no collection traverses it again
  (``gc.freeze``);
- the young generation is collected after ``young_threshold`` allocations instead of
  700, so most of a job's objects are freed by reference counting before a collection
  sees them, and few survive to make a full collection due. Cycles are still collected,
  a little later: at most about that many objects wait for it.
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
