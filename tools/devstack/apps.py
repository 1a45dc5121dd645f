"""The app processes of `make run`: the API, and the workers once they exist."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .management import command_exists, manage_argv
from .ports import LOOPBACK, free_port

logger = logging.getLogger(__name__)

WSGI_APP = "jobsvc.wsgi:application"
GUNICORN_CONFIG = Path("deploy") / "gunicorn.conf.py"  # relative to the repo
RUN_SCHEDULER = "run_scheduler"
RUN_EXECUTOR = "run_executor"
# ---- Metrics: what Prometheus scrapes (tools/devstack/prometheus.py) ----------------
# The `job` label of each kind of process, and the variable that gives a worker its port.
SCRAPE_JOBS = {"api": "jobsvc-api", "scheduler": "jobsvc-scheduler", "executor": "jobsvc-executor"}
METRICS_PORT_ENV = {
    "scheduler": "JOBSVC_SCHEDULER_METRICS_PORT",
    "executor": "JOBSVC_EXECUTOR_METRICS_PORT",
}


@dataclass(frozen=True)
class AppSpec:
    """One long-running app process: its name (and log file name) and command line."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)  # on top of the stack's env
    scrape_job: str | None = None  # Prometheus job of its /metrics; None: not scraped
    metrics_address: str | None = None  # host:port serving /metrics


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
            scrape_job=SCRAPE_JOBS["api"],
            metrics_address=api_bind,
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
            _worker_spec(name=f"{kind}-{index}", kind=kind, argv=manage_argv(repo, command))
            for index in range(count)
        )
    return specs


def _worker_spec(*, name: str, kind: str, argv: list[str]) -> AppSpec:
    """A worker on a metrics port of its own (a new free one each run)."""
    port = free_port()
    return AppSpec(
        name=name,
        argv=tuple(argv),
        env={METRICS_PORT_ENV[kind]: str(port)},
        scrape_job=SCRAPE_JOBS[kind],
        metrics_address=f"{LOOPBACK}:{port}",
    )
