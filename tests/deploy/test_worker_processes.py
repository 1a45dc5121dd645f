"""Worker processes that tests and benchmarks start end with the run that started them.

They run in sessions of their own, so a Ctrl-C or SIGTERM sent to the run never reaches
them. A run that ended without its teardown used to leave them running against servers
that were gone, retrying forever, and taking CPU from whatever ran next on the machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]

# A run that starts one worker (a process that would sleep for ten minutes), prints its
# pid, says when its teardown is done, and waits to be ended.
_RUN = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from tools.bench.processes import WorkerProcess, stop_on_sigterm

    if sys.argv[1] == "graceful":
        stop_on_sigterm()
    worker = WorkerProcess(
        kind="sleeper",
        name="sleeper",
        env={},
        log_dir=Path(sys.argv[2]),
        argv=[sys.executable, "-c", "import time; time.sleep(600)"],
    )
    print(worker.pid, flush=True)
    try:
        time.sleep(600)
    finally:
        worker.stop(timeout=10)
        print("torn down", flush=True)
    """
)


def _start_run(mode: str, tmp_path: Path) -> tuple[subprocess.Popen, int]:
    """The run and its worker's pid, once the worker runs its command.

    Until then the worker is ``setpriv`` setting the parent-death signal: a run killed in
    those first milliseconds leaves it unset (a window a real run, which starts its workers
    long before it is killed, does not hit; it failed this test about one run in three)."""
    run = subprocess.Popen(
        [sys.executable, "-c", _RUN, mode, str(tmp_path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    worker = int(run.stdout.readline())
    wait_until(lambda: _runs_its_command(worker), timeout=10, what="the worker started")
    return run, worker


def _runs_its_command(pid: int) -> bool:
    """``setpriv`` has set the parent-death signal and executed the worker's command."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return False
    return not argv[0].endswith(b"setpriv") and any(b"time.sleep(600)" in arg for arg in argv)


def _gone(pid: int) -> bool:
    """The process has exited (a zombie, not yet reaped by init, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


def test_a_worker_stops_when_the_run_that_started_it_is_killed(tmp_path):
    run, worker = _start_run("killed", tmp_path)
    try:
        run.kill()  # no teardown at all
        run.wait(timeout=10)
        wait_until(lambda: _gone(worker), timeout=10, what="the worker stopped")
    finally:
        if not _gone(worker):
            os.kill(worker, signal.SIGKILL)


def test_sigterm_tears_a_run_down_as_ctrl_c_does(tmp_path):
    run, worker = _start_run("graceful", tmp_path)
    try:
        run.send_signal(signal.SIGTERM)
        output, _ = run.communicate(timeout=20)
        assert "torn down" in output  # its finally blocks ran, not only the kernel's signal
        assert _gone(worker)
    finally:
        if not _gone(worker):
            os.kill(worker, signal.SIGKILL)
