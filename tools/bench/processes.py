"""App processes that benchmarks and end-to-end tests start: real ``manage.py`` commands."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class WorkerProcess:
    """One process (by default ``manage.py run_<kind> --worker-id <name>``) with its own log
    file (``append``: after what an earlier process of that name wrote); signals are sent
    to it alone. ``group``: the gid it runs with (no supplementary groups), for a firewall
    rule that matches its packets."""

    def __init__(
        self,
        *,
        kind: str,
        name: str,
        env: dict[str, str],
        log_dir: Path,
        args: tuple = (),
        argv: list[str] | None = None,
        append: bool = False,
        group: int | None = None,
    ) -> None:
        self.kind = kind
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("ab" if append else "wb")  # append: a restart's log
        self.process = subprocess.Popen(
            stopped_with_parent(
                argv or [sys.executable, "manage.py", f"run_{kind}", "--worker-id", name, *args]
            ),
            cwd=REPO,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **({} if group is None else {"group": group, "extra_groups": []}),
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, signum: int) -> None:
        if self.alive():
            os.kill(self.process.pid, signum)

    def kill(self) -> None:
        self.send(signal.SIGKILL)
        self.process.wait(timeout=10)

    def pause(self) -> None:
        self.send(signal.SIGSTOP)

    def resume(self) -> None:
        self.send(signal.SIGCONT)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (after SIGCONT, in case it is paused) and wait; SIGKILL if it hangs."""
        self.send(signal.SIGCONT)
        self.send(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.process.returncode
        finally:
            self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def stopped_with_parent(argv: list[str]) -> list[str]:
    """``argv``, made to get SIGTERM when the process that starts it dies, however it dies.

    Workers run in sessions of their own (signals are sent to one alone), so the Ctrl-C or
    the SIGTERM that ends a test run or a benchmark never reaches them; a run killed
    before its teardown (SIGKILL, a CI job cancelled, the launcher's grace run out) left
    them running against servers that were gone, retrying forever. util-linux's
    ``setpriv`` sets Linux's parent-death signal and then runs the command. The kernel
    sends it when the *thread* that started the process ends, so only commands started
    from the main thread get it: a worker started from a helper thread would be stopped
    when that thread ends.
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None or threading.current_thread() is not threading.main_thread():
        return argv
    return [setpriv, "--pdeathsig", "TERM", "--", *argv]


def stop_on_sigterm() -> None:
    """From now on SIGTERM unwinds this process as Ctrl-C does (``KeyboardInterrupt``):
    the ``finally`` blocks and fixtures that stop the workers it started run. By
    default SIGTERM ends a Python process at once, without them."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupt)
