"""Memory of the stack's processes, read from /proc: RSS and PSS by role.

A role is a process and, for servers made of several processes (a PostgreSQL server, the
API's gunicorn), all its descendants. Two measures, in MiB:

- ``rss``: resident set size, summed over the role's processes. For one process this is
  what ``ps`` shows; for a PostgreSQL server it counts the shared buffers once for every
  backend that touched them, so it grows as backends touch more of them.
- ``pss``: proportional set size (``/proc/PID/smaps_rollup``): a shared page counted
  once, split between the processes that map it; summed over a role it is the memory the
  role holds. ``pss_anon`` (heap, private memory), ``pss_file`` (mapped files: a
  broker's index files, libraries) and ``pss_shmem`` (PostgreSQL's shared buffers) split
  it. Reading smaps_rollup of another user's process needs root or the same user; where
  it cannot be read, PSS falls back to RSS.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tools.bench.proc_stat import process_stats

KIB_PER_MIB = 1024
_ROLLUP_FIELDS = {  # smaps_rollup line -> our name
    "Rss:": "rss",
    "Pss:": "pss",
    "Pss_Anon:": "pss_anon",
    "Pss_File:": "pss_file",
    "Pss_Shmem:": "pss_shmem",
}


@dataclass(frozen=True)
class Role:
    name: str  # e.g. "executor-0", "postgres-a", "broker"
    pid: int
    tree: bool = False  # with every descendant of ``pid``


def children_of(processes: Mapping[int, int]) -> dict[int, list[int]]:
    """pid -> its children, from pid -> parent pid."""
    children: dict[int, list[int]] = defaultdict(list)
    for pid, parent in processes.items():
        children[parent].append(pid)
    return children


def tree_of(pid: int, children: Mapping[int, list[int]]) -> list[int]:
    """``pid`` and all its descendants."""
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(children.get(current, ()))
    return found


def parents() -> dict[int, int]:
    """Every process's parent, from /proc."""
    return {pid: int(fields[1]) for pid, fields in process_stats().items()}


def parse_rollup(text: str) -> dict[str, float]:
    """The sizes of ``/proc/PID/smaps_rollup`` we use, in MiB."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in _ROLLUP_FIELDS:
            values[_ROLLUP_FIELDS[parts[0]]] = int(parts[1]) / KIB_PER_MIB
    return values


def process_memory(pid: int) -> dict[str, float] | None:
    """RSS, PSS and its parts of one process in MiB; None once it has exited."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            values = parse_rollup(rollup.read())
        if "pss" in values:
            return values
    except PermissionError:
        pass
    except (FileNotFoundError, ProcessLookupError):
        return None
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) / KIB_PER_MIB
                    return {"rss": rss, "pss": rss}
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None  # a zombie: no VmRSS line


def add_up(measures: Iterable[dict[str, float] | None]) -> dict[str, float]:
    total: dict[str, float] = defaultdict(float)
    for measure in measures:
        for name, value in (measure or {}).items():
            total[name] += value
    return {name: round(value, 1) for name, value in total.items()}


def sample(roles: Iterable[Role]) -> dict[str, dict[str, float]]:
    """Each role's memory now: its processes' RSS, PSS and PSS parts added up, in MiB."""
    roles = list(roles)
    children = children_of(parents()) if any(role.tree for role in roles) else {}
    memory = {}
    for role in roles:
        pids = tree_of(role.pid, children) if role.tree else [role.pid]
        memory[role.name] = add_up(process_memory(pid) for pid in pids)
    return memory


def directory_mib(path: str) -> float:
    """Disk space used by the files under ``path`` (allocated blocks), in MiB."""
    used = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                used += os.lstat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:  # a segment deleted meanwhile
                continue
    return round(used / 1024**2, 1)


def page_cache_mib() -> float:
    """The machine's page cache (``Cached`` in /proc/meminfo), in MiB."""
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("Cached:"):
                return round(int(line.split()[1]) / KIB_PER_MIB, 1)
    return 0.0
