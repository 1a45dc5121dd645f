"""The app processes of `make run`: the API, and the workers once they exist."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .management import command_exists, manage_argv

logger = logging.getLogger(__name__)

WSGI_APP = "jobsvc.wsgi:application"
GUNICORN_CONFIG = Path("deploy") / "gunicorn.conf.py"  # relative to the repo
RUN_SCHEDULER = "run_scheduler"
RUN_EXECUTOR = "run_executor"


@dataclass(frozen=True)
class AppSpec:
    """One long-running app process: its name (and log file name) and command line."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)  # on top of the stack's env


def app_specs(
    *,
    repo: Path,
    api_bind: str,
    control_socket: Path,
    schedulers: int,
    executors: int,
) -> list[AppSpec]:
    """Every app process of the stack, in start order."""
    specs = [
        AppSpec(
            name="api",
            argv=(
                sys.executable,
                "-m",
                "gunicorn",
                "--config",
                str(repo / GUNICORN_CONFIG),
                WSGI_APP,
            ),
            env={"JOBSVC_API_BIND": api_bind, "JOBSVC_API_CONTROL_SOCKET": str(control_socket)},
        )
    ]
    # ---- Worker processes -------------------------------------------------------------
    # The scheduler and executor workers join the stack here. Each kind is started only
    # once its management command exists, so the stack runs while they are being written.
    workers = (("scheduler", RUN_SCHEDULER, schedulers), ("executor", RUN_EXECUTOR, executors))
    for kind, command, count in workers:
        if not command_exists(repo, command):
            logger.info("no `manage.py %s` yet: the stack runs without %ss", command, kind)
            continue
        specs.extend(
            AppSpec(name=f"{kind}-{index}", argv=tuple(manage_argv(repo, command)))
            for index in range(count)
        )
    return specs
