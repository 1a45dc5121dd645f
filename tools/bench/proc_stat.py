"""Every process's ``/proc/PID/stat``, for the benchmarks' process-tree measurements."""

from __future__ import annotations

import os


def process_stats() -> dict[int, list[str]]:
    """Each live process's stat fields after its command name: ``[state, ppid, ...]``.

    ``fields[1]`` is the parent; ``fields[11]`` and ``fields[12]`` are user and system
    ticks, ``fields[13]`` and ``fields[14]`` those of the children it reaped."""
    result = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat_file:
                stat = stat_file.read()
        except OSError:  # exited meanwhile
            continue
        result[int(entry)] = stat[stat.rindex(")") + 2 :].split()
    return result
