"""Child processes the launcher owns: their own session, a log file, a pid file.

Every child starts with ``start_new_session=True``: a Ctrl-C at the terminal reaches only
the launcher, which then stops the children in its own order, instead of every process
dying at once. The child's session id is its pid, so a last-resort SIGKILL can take the
whole process group (gunicorn workers, PostgreSQL backends) with it.

An optional pid file records the child's pid and kernel start time, so that a later launch
can stop processes left behind by a launcher that was killed without a chance to clean up
(`reap_leftovers`); the start time tells a leftover from an unrelated process that reused
the pid.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import logging
import os
import pwd
import shlex
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .errors import BinaryNotFound
from .polling import poll_until

logger = logging.getLogger(__name__)

KILL_WAIT = 5.0  # seconds to wait for a process to vanish after SIGKILL
LEFTOVER_STOP_TIMEOUT = 20.0  # seconds a leftover gets between its stop signal and SIGKILL
LOG_TAIL_LINES = 40  # lines of a log quoted in an error message
LOG_TAIL_BYTES = 64 * 1024  # bytes read from the end of a log to find those lines


@dataclass(frozen=True)
class RunAs:
    """An unprivileged system user a child runs as (PostgreSQL refuses to run as root)."""

    user: str
    uid: int
    gid: int

    @classmethod
    def lookup(cls, user: str) -> RunAs:
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            raise BinaryNotFound(
                f"system user {user!r} does not exist (run `make bootstrap`)"
            ) from None
        return cls(user=user, uid=entry.pw_uid, gid=entry.pw_gid)


class ManagedProcess:
    """One child process in its own session, writing to a log file.

    States: created -> running (`start`) -> exited (by itself, or by `stop`). `stop` is
    idempotent; a stopped process is not started again: make a new `ManagedProcess`.
    """

    def __init__(
        self,
        *,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        run_as: RunAs | None = None,
        pid_file: Path | None = None,
        stop_signal: int = signal.SIGTERM,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._run_as = run_as
        self._pid_file = pid_file
        self._stop_signal = stop_signal
        self._popen: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        """Start the child; its stdout and stderr go to the log file (appended)."""
        if self._popen is not None:
            raise RuntimeError(f"{self.name} was already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab", buffering=0)  # noqa: SIM115 (closed in stop)
        stamp = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        self._log.write(f"=== {stamp} starting {shlex.join(self.argv)}\n".encode())
        privileges = {}
        if self._run_as is not None and os.geteuid() == 0:
            privileges = {
                "user": self._run_as.uid,
                "group": self._run_as.gid,
                "extra_groups": [],
            }
        self._popen = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self._env,
            cwd=self._cwd,
            start_new_session=True,
            **privileges,
        )
        if self._pid_file is not None:
            pid = self._popen.pid
            _PidRecord(
                pid=pid, name=self.name, start_time=_start_time(pid), stop_signal=self._stop_signal
            ).write(self._pid_file)
        logger.debug("started %s (pid %d): %s", self.name, self._popen.pid, self.argv)

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    @property
    def returncode(self) -> int | None:
        """The exit code once the child has exited, else None."""
        return self._popen.poll() if self._popen is not None else None

    def is_running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def send_signal(self, signum: int) -> None:
        if self.is_running():
            with contextlib.suppress(ProcessLookupError):
                self._popen.send_signal(signum)  # type: ignore[union-attr]

    def wait(self, timeout: float) -> int | None:
        """The exit code, or None if the child still runs after `timeout` seconds."""
        if self._popen is None:
            return None
        try:
            return self._popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, *, timeout: float, signum: int | None = None) -> int | None:
        """Send the stop signal, wait up to `timeout` seconds, then SIGKILL the group.

        Returns the exit code (None if never started). Safe to call more than once.
        """
        if self._popen is None:
            return None
        if self._popen.poll() is None:
            self.send_signal(signum if signum is not None else self._stop_signal)
            if self.wait(timeout) is None:
                logger.warning(
                    "%s (pid %d) still runs %.0fs after it was asked to stop: killing it",
                    self.name,
                    self._popen.pid,
                    timeout,
                )
                self.kill_group()
                self.wait(KILL_WAIT)
        self._close()
        return self._popen.returncode

    def renewed(self) -> ManagedProcess:
        """A new, unstarted process with the same command, log, environment and user."""
        return ManagedProcess(
            name=self.name,
            argv=self.argv,
            log_path=self.log_path,
            env=self._env,
            cwd=self._cwd,
            run_as=self._run_as,
            pid_file=self._pid_file,
            stop_signal=self._stop_signal,
        )

    def describe_exit(self) -> str:
        """How the child ended: "exited with code 3", "was killed by SIGKILL"."""
        code = self.returncode
        if code is None:
            return "is still running"
        if code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with code {code}"

    def release(self) -> None:
        """After the child exited by itself: kill what is left of its process group (a
        gunicorn master's workers would keep its port), close the log, drop the pid file."""
        if self._popen is None or self._popen.poll() is None:
            raise RuntimeError(f"{self.name} has not exited")
        self.kill_group()
        self._close()

    def kill_group(self) -> None:
        """SIGKILL the child and everything in its process group."""
        if self._popen is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._popen.pid, signal.SIGKILL)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return log_tail(self.log_path, lines=lines)

    def _close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._pid_file is not None:
            self._pid_file.unlink(missing_ok=True)


def log_tail(path: Path, *, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log file, indented for quoting in a message."""
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - LOG_TAIL_BYTES))
            text = log.read().decode(errors="replace")
    except OSError:
        return "    (no log)"
    return "\n".join("    " + line for line in text.splitlines()[-lines:])


def reap_leftovers(run_dir: Path, *, last: Sequence[str] = ()) -> None:
    """Stop processes recorded in `run_dir/*.pid` by an earlier launch that still run.

    Processes named in `last` are stopped after all others, in that order (servers after
    the apps that use them). Call this only while holding the state dir's lock: the pid
    files then cannot belong to a launcher that is alive.
    """

    def rank(pid_file: Path) -> tuple[int, str]:
        name = pid_file.stem
        return (last.index(name) + 1 if name in last else 0, name)

    for pid_file in sorted(run_dir.glob("*.pid"), key=rank):
        record = _PidRecord.read(pid_file)
        if record is not None and _start_time(record.pid) == record.start_time:
            logger.warning(
                "stopping %s (pid %d), left running by an earlier launch", record.name, record.pid
            )
            _stop_foreign(record)
        pid_file.unlink(missing_ok=True)


@dataclass(frozen=True)
class _PidRecord:
    """What a pid file holds: enough to recognise the process and stop it the right way."""

    pid: int
    name: str
    start_time: int | None
    stop_signal: int

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dataclasses.asdict(self)) + "\n")

    @classmethod
    def read(cls, path: Path) -> _PidRecord | None:
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None


def _start_time(pid: int) -> int | None:
    """The kernel start time of `pid` (clock ticks since boot), None if it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the command name (which may contain spaces) start at field 3 (state);
    # field 22 is the start time.
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # a zombie has exited; only its parent's wait is missing
        return None
    return int(fields[19])


def _stop_foreign(record: _PidRecord) -> None:
    """Stop a process this launcher did not start (so cannot wait for)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(record.pid, record.stop_signal)

    def gone() -> bool:
        return _start_time(record.pid) != record.start_time

    if not poll_until(gone, timeout=LEFTOVER_STOP_TIMEOUT):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(record.pid, signal.SIGKILL)
        poll_until(gone, timeout=KILL_WAIT)
