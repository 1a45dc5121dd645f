"""A local Prometheus for `make run`: it scrapes the API and every worker of the stack and
evaluates the same alert rules as production (deploy/prometheus/alerts.yml).

Started only when Debian's `prometheus` package is installed (`make bootstrap` installs
it); without it `make run` runs as before. Files under `root` (`.state/prometheus/`):

    prometheus.yml   written on every start with this run's ports (edits are lost)
    data/            the time series database, kept across runs

Each target is labelled `instance=<process name>` ("api", "scheduler-0"), not by its
address, so a series continues across runs although the workers' ports change.
It runs as an app process of the stack: stopped with the apps, before the servers.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from .apps import AppSpec
from .errors import ServerStartError
from .polling import poll_until
from .ports import LOOPBACK
from .probes import http_ok
from .stack import Stack

logger = logging.getLogger(__name__)

BINARY = "prometheus"  # on PATH: /usr/bin/prometheus from Debian's package
ALERT_RULES = Path("deploy") / "prometheus" / "alerts.yml"  # relative to the repo
SCRAPE_INTERVAL = "5s"  # a change on the local stack shows within seconds
RETENTION = "7d"  # how long the local TSDB keeps samples
READY_TIMEOUT = 30.0  # seconds from start until GET /-/ready answers 200
NAME = "prometheus"  # process name: log file logs/prometheus.log, pid file run/prometheus.pid


@dataclass(frozen=True)
class ScrapeTarget:
    """One process Prometheus scrapes at http://ADDRESS/metrics."""

    job: str  # "jobsvc-api", "jobsvc-scheduler", "jobsvc-executor"
    instance: str  # the process name
    address: str  # host:port


def prometheus_binary() -> str | None:
    """Path of the prometheus server binary, None when it is not installed."""
    return shutil.which(BINARY)


def scrape_targets(specs: Sequence[AppSpec]) -> list[ScrapeTarget]:
    """The targets of the app processes that serve metrics."""
    return [
        ScrapeTarget(job=spec.scrape_job, instance=spec.name, address=spec.metrics_address)
        for spec in specs
        if spec.scrape_job is not None and spec.metrics_address is not None
    ]


def render_config(
    targets: Sequence[ScrapeTarget],
    *,
    rule_files: Sequence[Path],
    scrape_interval: str = SCRAPE_INTERVAL,
) -> str:
    """prometheus.yml text: one scrape job per `job`, in the order the targets come."""
    jobs: dict[str, list[ScrapeTarget]] = {}
    for target in targets:
        jobs.setdefault(target.job, []).append(target)
    config = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {
                "job_name": job,
                "metrics_path": "/metrics",
                "static_configs": [
                    {"targets": [target.address], "labels": {"instance": target.instance}}
                    for target in members
                ],
            }
            for job, members in jobs.items()
        ],
    }
    header = "# Written by tools/devstack on every start of `make run`; edits are lost.\n"
    return header + yaml.safe_dump(config, sort_keys=False)


class LocalPrometheus:
    """The files, command line and readiness of one Prometheus on 127.0.0.1:`port`."""

    def __init__(
        self,
        *,
        root: Path,
        port: int,
        targets: Sequence[ScrapeTarget],
        rule_files: Sequence[Path],
        binary: str = BINARY,
        scrape_interval: str = SCRAPE_INTERVAL,
    ) -> None:
        self.root = root
        self.port = port
        self.targets = tuple(targets)
        self.rule_files = tuple(rule_files)
        self.binary = binary
        self.scrape_interval = scrape_interval
        self.config_path = root / "prometheus.yml"
        self.data_dir = root / "data"

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def prepare(self) -> None:
        """Write this run's config; create the data dir."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            render_config(
                self.targets, rule_files=self.rule_files, scrape_interval=self.scrape_interval
            )
        )

    def argv(self) -> list[str]:
        return [
            self.binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.data_dir}",
            f"--storage.tsdb.retention.time={RETENTION}",
            f"--web.listen-address={LOOPBACK}:{self.port}",
        ]

    def is_ready(self) -> bool:
        return http_ok(f"{self.url}/-/ready")


def start_local_prometheus(
    stack: Stack, specs: Sequence[AppSpec], *, root: Path, repo: Path, port: int
) -> str | None:
    """Start Prometheus as an app of `stack`, scraping `specs`; its URL, None if not installed.

    Raises `ServerStartError` if it exits or does not answer within `READY_TIMEOUT`.
    """
    binary = prometheus_binary()
    if binary is None:
        logger.info("`prometheus` is not installed: the stack runs without it")
        return None
    prometheus = LocalPrometheus(
        root=root,
        port=port,
        targets=scrape_targets(specs),
        rule_files=[repo / ALERT_RULES],
        binary=binary,
    )
    prometheus.prepare()
    process = stack.start_app(AppSpec(name=NAME, argv=tuple(prometheus.argv())), repo=repo)

    def give_up() -> None:
        if not process.is_running():
            raise ServerStartError(
                f"prometheus exited with code {process.returncode} while starting; last "
                f"lines of {process.log_path}:\n{process.log_tail()}"
            )

    if not poll_until(prometheus.is_ready, timeout=READY_TIMEOUT, give_up=give_up):
        raise ServerStartError(
            f"prometheus did not answer on {prometheus.url} within {READY_TIMEOUT:.0f}s; "
            f"see {process.log_path}"
        )
    logger.info("prometheus ready on %s", prometheus.url)
    return prometheus.url
