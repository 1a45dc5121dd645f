"""App processes that benchmarks and end-to-end tests start: real ``manage.py`` commands."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class WorkerProcess:
    """One process (by default ``manage.py run_<kind> --worker-id <name>``) with its own log
    file (``append``: after what an earlier process of that name wrote); signals are sent
    to it alone."""

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
    ) -> None:
        self.kind = kind
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("ab" if append else "wb")  # append: a restart's log
        self.process = subprocess.Popen(
            argv or [sys.executable, "manage.py", f"run_{kind}", "--worker-id", name, *args],
            cwd=REPO,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
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
