"""CPU by kind of process, as the benchmarks report it: a window's arithmetic, and
sampling this machine's /proc for the launcher's descendants."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tools.bench.stack_cpu import CpuUsed, StackCpu


def test_per_job_and_cores_count_only_what_the_window_used():
    before = {"executor": 10.0, "postgres": 4.0, StackCpu.MACHINE: 100.0}
    after = {"executor": 12.0, "postgres": 5.0, "scheduler": 0.5, StackCpu.MACHINE: 105.0}

    used = CpuUsed.between(before, after, seconds=2.0)

    # 2 s of executors, 1 s of PostgreSQL and a scheduler that started meanwhile (0.5 s)
    assert used.per_job_us(10_000) == {
        "executor": 200.0,
        "postgres": 100.0,
        "scheduler": 50.0,
        "total": 350.0,
    }
    assert used.cores() == {
        "executor": 1.0,
        "postgres": 0.5,
        "scheduler": 0.25,
        "stack": 1.75,
        "machine": 2.5,
    }


def test_a_descendant_is_counted_by_the_kind_its_command_line_names():
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 60: pass"
    cpu = StackCpu(launcher_pid=os.getpid())  # the launcher: this process
    child = subprocess.Popen([sys.executable, "-c", burn, "run_executor"])
    try:
        deadline = time.monotonic() + 30
        while (used := cpu.sample()).get("executor", 0.0) < 0.2:
            assert time.monotonic() < deadline, f"no executor CPU counted: {used}"
            time.sleep(0.05)  # polling the child's CPU time, bounded by the deadline
        assert used.get("scheduler", 0.0) == 0.0  # nothing else was called one
    finally:
        child.kill()
        child.wait()


def test_a_kinds_time_keeps_what_its_exited_processes_used():
    """A PostgreSQL backend that exits takes its CPU time out of /proc; its parent keeps it
    (as time of reaped children), so a kind's total does not drop."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    parent = (
        "import subprocess, sys\n"
        f"for _ in range(2): subprocess.run([sys.executable, '-c', {burn!r}])\n"
        "print('reaped', flush=True)\n"
        "sys.stdin.read()\n"
    )
    cpu = StackCpu(launcher_pid=os.getpid())
    with _postmaster(parent) as postmaster:
        assert postmaster.stdout.readline() == "reaped\n"
        assert cpu.sample().get("postgres", 0.0) >= 0.6  # the two exited children's 0.3 s


def test_an_exited_process_not_reaped_yet_counts_as_its_parents_kind():
    """An exited process keeps its CPU time in /proc until its parent reaps it, but no
    longer its command line: it counts as its parent's kind, where the time goes next."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    parent = (
        "import os, subprocess, sys\n"
        # the child is named a scheduler; the parent's own command line must not say so
        f"child = subprocess.Popen([sys.executable, '-c', {burn!r}, 'run_' + 'scheduler'])\n"
        "os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped\n"
        "print('exited', flush=True)\n"
        "sys.stdin.read()\n"
    )
    cpu = StackCpu(launcher_pid=os.getpid())
    with _postmaster(parent) as postmaster:
        assert postmaster.stdout.readline() == "exited\n"
        used = cpu.sample()
        assert used.get("postgres", 0.0) >= 0.3, used
        assert used.get("scheduler", 0.0) == 0.0, used


@contextmanager
def _postmaster(code: str) -> Iterator[subprocess.Popen]:
    """A child of this process running ``code``, its command line naming it postgres;
    killed afterwards."""
    process = subprocess.Popen(
        [sys.executable, "-c", code, "postgres"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        process.kill()
        process.wait()
