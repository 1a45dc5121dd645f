"""The Prometheus `make run` starts (tools/devstack/prometheus.py).

The config it writes must pass promtool and scrape every app process on the port that
process was given; a real Prometheus started from it must scrape a target.
"""

from __future__ import annotations

import http.server
import json
import shutil
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.deploy.contract import SCRAPE_JOBS
from tests.deploy.support import REPO, promtool
from tools.devstack import prometheus as local_prometheus
from tools.devstack.apps import METRICS_PORT_ENV, app_specs
from tools.devstack.polling import poll_until
from tools.devstack.ports import LOOPBACK, free_port
from tools.devstack.process import ManagedProcess
from tools.devstack.prometheus import (
    ALERT_RULES,
    LocalPrometheus,
    ScrapeTarget,
    render_config,
    scrape_targets,
    start_local_prometheus,
)

START_TIMEOUT = 30.0  # seconds for Prometheus to start and scrape a target once
EXPOSITION = b"# TYPE jobsvc_shards_configured gauge\njobsvc_shards_configured 4\n"


def run_specs(tmp_path: Path):
    return app_specs(
        repo=REPO,
        api_bind=f"{LOOPBACK}:8123",
        control_socket=tmp_path / "gunicorn.ctl",
        schedulers=2,
        executors=2,
    )


def test_every_app_process_is_a_target_on_the_port_it_was_given(tmp_path):
    specs = run_specs(tmp_path)
    targets = {target.instance: target for target in scrape_targets(specs)}
    assert set(targets) == {s.name for s in specs}
    assert targets["api"] == ScrapeTarget("jobsvc-api", "api", f"{LOOPBACK}:8123")
    for spec in specs:
        kind = spec.name.rsplit("-", 1)[0]
        if kind in METRICS_PORT_ENV:
            port = spec.env[METRICS_PORT_ENV[kind]]
            assert targets[spec.name].address == f"{LOOPBACK}:{port}"
    assert {target.job for target in targets.values()} == set(SCRAPE_JOBS)


def test_each_worker_gets_a_port_of_its_own(tmp_path):
    ports = [
        port for spec in run_specs(tmp_path) for name, port in spec.env.items() if "METRICS" in name
    ]
    assert len(ports) == 4 and len(set(ports)) == 4


def test_the_written_config_passes_promtool_with_the_production_rules(tmp_path):
    prometheus = LocalPrometheus(
        root=tmp_path,
        port=free_port(),
        targets=scrape_targets(run_specs(tmp_path)),
        rule_files=[REPO / ALERT_RULES],
    )
    prometheus.prepare()
    result = promtool("check", "config", str(prometheus.config_path), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    config = yaml.safe_load(prometheus.config_path.read_text())
    assert config["rule_files"] == [str(REPO / ALERT_RULES)]


def test_targets_are_grouped_by_job_and_labelled_by_process_name():
    config = yaml.safe_load(
        render_config(
            [
                ScrapeTarget("jobsvc-scheduler", "scheduler-0", "127.0.0.1:1"),
                ScrapeTarget("jobsvc-scheduler", "scheduler-1", "127.0.0.1:2"),
            ],
            rule_files=[],
        )
    )
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "jobsvc-scheduler"
    assert [s["labels"]["instance"] for s in job["static_configs"]] == [
        "scheduler-0",
        "scheduler-1",
    ]


def test_without_prometheus_installed_the_stack_runs_without_it(monkeypatch, tmp_path):
    monkeypatch.setattr(local_prometheus, "prometheus_binary", lambda: None)
    stack = object()  # never touched: nothing is started
    url = start_local_prometheus(stack, run_specs(tmp_path), root=tmp_path, repo=REPO, port=1)
    assert url is None
    assert not (tmp_path / "prometheus.yml").exists()


@pytest.fixture
def metrics_server() -> Iterator[str]:
    """A process stand-in serving a fixed exposition at /metrics; yields its address."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(EXPOSITION)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer((LOOPBACK, free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{LOOPBACK}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_started_prometheus_scrapes_its_targets(tmp_path, metrics_server):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus not found: `make bootstrap` installs Debian's package")
    prometheus = LocalPrometheus(
        root=tmp_path,
        port=free_port(),
        targets=[ScrapeTarget("jobsvc-scheduler", "scheduler-0", metrics_server)],
        rule_files=[REPO / ALERT_RULES],
        binary=binary,
        scrape_interval="1s",
    )
    prometheus.prepare()
    process = ManagedProcess(
        name="prometheus", argv=prometheus.argv(), log_path=tmp_path / "prometheus.log"
    )
    process.start()
    try:
        assert poll_until(prometheus.is_ready, timeout=START_TIMEOUT), process.log_tail()

        def scraped() -> bool:
            query = f"{prometheus.url}/api/v1/query?query=jobsvc_shards_configured"
            with urllib.request.urlopen(query, timeout=2) as response:
                result = json.load(response)["data"]["result"]
            return bool(result) and result[0]["metric"]["instance"] == "scheduler-0"

        assert poll_until(scraped, timeout=START_TIMEOUT), process.log_tail()
    finally:
        process.stop(timeout=10)
