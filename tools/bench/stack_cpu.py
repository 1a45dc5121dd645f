"""CPU time of the stack's processes by kind, read from /proc: what a benchmark's work cost.

On a shared 2-core VM the same run can be a third faster or slower from hour to hour, so
jobs/s alone cannot tell a cheaper build from a quieter machine; CPU seconds per job by
kind of process (executors, schedulers, PostgreSQL, the broker) can, and they say where
the CPU went when the machine's cores were all busy.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from dataclasses import dataclass

from tools.bench.proc_stat import process_stats


class StackCpu:
    """CPU seconds used so far by the stack's processes, by kind, read from /proc.

    The stack is every descendant of the launcher (``make bench``): its servers, this
    suite and the workers it starts. ``MACHINE`` is the whole machine's busy time, so
    that the load of everything else can be told apart.
    """

    MACHINE = "machine"
    _KINDS = (  # the first marker found in a process's command line names its kind
        ("run_executor", "executor"),
        ("run_scheduler", "scheduler"),
        ("postgres", "postgres"),
        ("kafka.Kafka", "broker"),
        ("zookeeper", "zookeeper"),
        ("gunicorn", "api"),
        ("tools.loadgen", "loadgen"),
    )

    def __init__(self, *, launcher_pid: int) -> None:
        self.launcher_pid = launcher_pid
        self._ticks = os.sysconf("SC_CLK_TCK")

    def sample(self) -> dict[str, float]:
        stats = process_stats()
        parents = {pid: int(fields[1]) for pid, fields in stats.items()}
        # Own time and that of reaped children (a PostgreSQL backend's, once it exited, is
        # the postmaster's): a kind's total never drops when one of its processes exits.
        seconds = {pid: sum(map(int, f[11:15])) / self._ticks for pid, f in stats.items()}
        used: dict[str, float] = defaultdict(float)
        kinds: dict[int, str] = {}
        for pid, cpu_seconds in seconds.items():
            if self._descends(pid, parents):
                used[self._kind(pid, parents, kinds)] += cpu_seconds
        used[self.MACHINE] = self._machine_busy()
        return dict(used)

    def _descends(self, pid: int, parents: dict[int, int]) -> bool:
        while pid > 1:
            if pid == self.launcher_pid:
                return True
            pid = parents.get(pid, 0)
        return False

    def _kind(self, pid: int, parents: dict[int, int], kinds: dict[int, str]) -> str:
        """The kind its command line names, else its parent's: a process that exited and
        is not reaped yet has no command line, and its time goes to its parent's when it
        is reaped (a PostgreSQL backend's to the postmaster's), so it counts there now."""
        if pid not in kinds:
            kind = self._named_kind(pid)
            if kind is None:
                parent = parents.get(pid, 0)
                top = parent <= 1 or pid == self.launcher_pid
                kind = "other" if top else self._kind(parent, parents, kinds)
            kinds[pid] = kind
        return kinds[pid]

    def _named_kind(self, pid: int) -> str | None:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                command = cmdline.read().decode(errors="replace")
        except OSError:
            return None
        return next((kind for marker, kind in self._KINDS if marker in command), None)

    def _machine_busy(self) -> float:
        with open("/proc/stat") as stat:
            ticks = [int(value) for value in stat.readline().split()[1:]]
        idle, iowait = ticks[3], ticks[4]
        return (sum(ticks) - idle - iowait) / self._ticks


@dataclass(frozen=True)
class CpuUsed:
    """CPU seconds by kind of process over ``seconds`` of wall time."""

    by_kind: dict[str, float]
    machine: float  # the whole machine's busy CPU seconds meanwhile
    seconds: float

    @classmethod
    def between(cls, before: dict[str, float], after: dict[str, float], seconds: float):
        used = {
            kind: after[kind] - before.get(kind, 0.0) for kind in after if kind != StackCpu.MACHINE
        }
        machine = after[StackCpu.MACHINE] - before[StackCpu.MACHINE]
        return cls(by_kind=used, machine=machine, seconds=seconds)

    def per_job_us(self, jobs: int) -> dict[str, float]:
        """Microseconds of CPU per job by kind, and ``total`` for the whole stack."""
        per_job = {
            kind: round(1e6 * seconds / max(jobs, 1), 1)
            for kind, seconds in sorted(self.by_kind.items())
        }
        per_job["total"] = round(1e6 * sum(self.by_kind.values()) / max(jobs, 1), 1)
        return per_job

    def cores(self) -> dict[str, float]:
        """Mean cores busy by kind, ``stack`` for all of them and ``machine`` for the
        whole machine (other load included)."""
        span = max(self.seconds, 1e-3)
        cores = {kind: round(seconds / span, 2) for kind, seconds in sorted(self.by_kind.items())}
        cores["stack"] = round(sum(self.by_kind.values()) / span, 2)
        cores["machine"] = round(self.machine / span, 2)
        return cores


class CpuWindow:
    """CPU used by the stack between ``start()`` and ``stop()``."""

    def __init__(self) -> None:
        # The launcher (``python -m tools.devstack bench``) started the servers and
        # this suite, which starts the workers: the stack is the launcher's descendants.
        self._cpu = StackCpu(launcher_pid=os.getppid())
        self._before: dict[str, float] = {}
        self._started = 0.0

    def start(self) -> None:
        self._before, self._started = self._cpu.sample(), time.monotonic()

    def stop(self) -> CpuUsed:
        """Call before the workers stop, while their CPU time is still readable."""
        after = self._cpu.sample()
        return CpuUsed.between(self._before, after, time.monotonic() - self._started)
