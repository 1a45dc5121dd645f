"""Running the Django side's `manage.py` commands against a stack.

`migrate_all` (schema of the control DB and every shard) and `ensure_topics` (Kafka
topics) are both idempotent and touch different servers, so they run at the same time.
Their output goes to `<logs>/<command>.log`; a failure quotes its last lines.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import ManagementCommandFailed
from .process import ManagedProcess

logger = logging.getLogger(__name__)

POLL_INTERVAL = 0.1  # seconds between checks on running commands
ABORT_TIMEOUT = 10.0  # seconds a command gets to exit when the launcher gives up on it


@dataclass(frozen=True)
class ManagementCommand:
    """A `manage.py` command and how long it may run."""

    name: str
    timeout: float  # seconds


MIGRATE_ALL = ManagementCommand("migrate_all", timeout=600.0)
ENSURE_TOPICS = ManagementCommand("ensure_topics", timeout=180.0)
SETUP_COMMANDS = (MIGRATE_ALL, ENSURE_TOPICS)


def manage_argv(repo: Path, *args: str) -> list[str]:
    """`<this venv's python> <repo>/manage.py ARGS`."""
    return [sys.executable, str(repo / "manage.py"), *args]


def command_exists(repo: Path, command: str) -> bool:
    """True if some Django app in the repo ships the management command `command`."""
    patterns = (
        f"jobsvc/*/management/commands/{command}.py",
        f"*/management/commands/{command}.py",
    )
    return any(any(repo.glob(pattern)) for pattern in patterns)


def run_commands(
    commands: Sequence[ManagementCommand],
    *,
    repo: Path,
    env: Mapping[str, str],
    logs_dir: Path,
) -> None:
    """Run `commands` concurrently; raise `ManagementCommandFailed` on the first failure."""
    started = time.monotonic()
    running: list[tuple[ManagementCommand, ManagedProcess]] = []
    try:
        for command in commands:
            process = ManagedProcess(
                name=command.name,
                argv=manage_argv(repo, command.name),
                log_path=logs_dir / f"{command.name}.log",
                env=env,
                cwd=repo,
            )
            process.start()
            running.append((command, process))
        while running:
            for command, process in list(running):
                _check(command, process, started)
                if process.returncode == 0:
                    logger.info(
                        "manage.py %s done in %.1fs", command.name, time.monotonic() - started
                    )
                    running.remove((command, process))
            time.sleep(POLL_INTERVAL)
    finally:
        for _command, process in running:
            process.stop(timeout=ABORT_TIMEOUT)


def _check(command: ManagementCommand, process: ManagedProcess, started: float) -> None:
    code = process.returncode
    if code not in (None, 0):
        raise ManagementCommandFailed(
            f"manage.py {command.name} failed (exit {code}); last lines of "
            f"{process.log_path}:\n{process.log_tail()}"
        )
    if code is None and time.monotonic() - started > command.timeout:
        raise ManagementCommandFailed(
            f"manage.py {command.name} still runs after {command.timeout:.0f}s; last lines "
            f"of {process.log_path}:\n{process.log_tail()}"
        )
