"""Prometheus: the compose config, the alert rules and their unit tests, through promtool.

promtool comes with Debian's `prometheus` package, which `make bootstrap` installs; a
missing promtool fails these tests rather than skipping them.
"""

from __future__ import annotations

import pytest
import yaml

from tests.deploy.contract import SCRAPE_JOBS, queryable_names
from tests.deploy.support import (
    PROMETHEUS_DIR,
    REPO,
    bind_mounts,
    promql_metric_names,
    promtool,
    service_env,
    services,
    services_running,
)

CONFIG = PROMETHEUS_DIR / "prometheus.yml"
RULES = PROMETHEUS_DIR / "alerts.yml"
RULE_TESTS = PROMETHEUS_DIR / "alerts_test.yml"
# The alerts the product promises (issue: observability); others may be added.
REQUIRED_ALERTS = {
    "JobLatencyP99High",
    "QueueLagHigh",
    "JobsDeadLettered",
    "ApiServerErrors",
    "ShardWithoutScheduler",
    "ExecutorLagGrowing",
    "TargetDown",
}
SEVERITIES = {"critical", "warning"}
# Where each kind of process serves its metrics port, in its compose environment.
METRICS_PORT_ENV = {
    "jobsvc-scheduler": "JOBSVC_SCHEDULER_METRICS_PORT",
    "jobsvc-executor": "JOBSVC_EXECUTOR_METRICS_PORT",
}


def alerting_rules() -> list[dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def scrape_targets() -> dict[str, list[str]]:
    """Scrape job -> its targets, from the compose Prometheus config."""
    config = yaml.safe_load(CONFIG.read_text())
    return {
        job["job_name"]: [t for static in job["static_configs"] for t in static["targets"]]
        for job in config["scrape_configs"]
    }


# ---- promtool ---------------------------------------------------------------------------------


def test_promtool_accepts_the_compose_config():
    """`rule_files` is relative to the config, so the same file works in the container."""
    result = promtool("check", "config", CONFIG.name)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_accepts_the_alert_rules():
    result = promtool("check", "rules", RULES.name)
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rule_unit_tests_pass():
    result = promtool("test", "rules", RULE_TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- the rules --------------------------------------------------------------------------------


def test_every_promised_alert_exists():
    assert {rule["alert"] for rule in alerting_rules()} >= REQUIRED_ALERTS


@pytest.mark.parametrize("rule", alerting_rules(), ids=lambda rule: rule["alert"])
def test_alert_has_severity_summary_and_description(rule):
    assert rule["labels"]["severity"] in SEVERITIES
    assert rule["annotations"]["summary"].strip()
    assert rule["annotations"]["description"].strip()


RUNBOOKS = REPO / "docs" / "runbooks"
RUNBOOK_SECTIONS = ("## What it means", "## How to check", "## What to do")


@pytest.mark.parametrize("rule", alerting_rules(), ids=lambda rule: rule["alert"])
def test_alert_links_its_runbook_which_says_what_to_do(rule):
    url = rule["annotations"]["runbook_url"]
    assert url == f"docs/runbooks/{rule['alert']}.md"
    page = (REPO / url).read_text()
    assert page.startswith(f"# {rule['alert']}\n")
    for section in RUNBOOK_SECTIONS:
        assert section in page, f"{url} has no '{section}'"


def test_every_runbook_is_an_alerts_and_listed_in_the_index():
    alerts = {rule["alert"] for rule in alerting_rules()}
    pages = {path.stem for path in RUNBOOKS.glob("*.md")} - {"README"}
    assert pages == alerts
    index = (RUNBOOKS / "README.md").read_text()
    assert all(f"({alert}.md)" in index for alert in alerts)


def test_the_queue_lag_alert_is_per_shard():
    [rule] = [rule for rule in alerting_rules() if rule["alert"] == "QueueLagHigh"]
    assert "jobsvc_oldest_due_job_age_seconds" in rule["expr"]
    assert "by (shard)" in rule["expr"]


@pytest.mark.parametrize("rule", alerting_rules(), ids=lambda rule: rule["alert"])
def test_alert_queries_only_contract_metrics(rule):
    unknown = promql_metric_names(rule["expr"]) - queryable_names()
    assert not unknown, f"{rule['alert']} queries {sorted(unknown)}, not in the contract"


@pytest.mark.parametrize("rule", alerting_rules(), ids=lambda rule: rule["alert"])
def test_alert_has_a_firing_and_a_quiet_unit_test(rule):
    cases = [
        case
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case["alertname"] == rule["alert"]
    ]
    assert any(case.get("exp_alerts") for case in cases), f"no test where {rule['alert']} fires"
    assert any(not case.get("exp_alerts") for case in cases), f"no quiet test of {rule['alert']}"


# ---- scrape targets against docker-compose.yml -------------------------------------------------


def test_scrape_jobs_are_the_contracts():
    assert set(SCRAPE_JOBS) <= set(scrape_targets())


def test_every_target_is_a_compose_service_on_its_metrics_port():
    for job, targets in scrape_targets().items():
        if job not in SCRAPE_JOBS:
            continue
        for target in targets:
            host, port = target.rsplit(":", 1)
            assert host in services(), f"{job}: no service {host}"
            env = service_env(services()[host])
            if job == "jobsvc-api":
                assert env["JOBSVC_API_BIND"].rsplit(":", 1)[1] == port, target
            else:
                assert env[METRICS_PORT_ENV[job]] == port, target


def test_every_worker_and_the_api_are_scraped():
    expected = {
        "jobsvc-api": {"api"},
        "jobsvc-scheduler": set(services_running("run_scheduler")),
        "jobsvc-executor": set(services_running("run_executor")),
    }
    for job, names in expected.items():
        scraped = {target.rsplit(":", 1)[0] for target in scrape_targets()[job]}
        assert scraped == names, job


def test_the_compose_prometheus_mounts_this_config_and_its_rules():
    mounts = dict(bind_mounts(services()["prometheus"]))
    assert mounts.get("./deploy/prometheus") == "/etc/prometheus"
    assert "--config.file=/etc/prometheus/prometheus.yml" in services()["prometheus"]["command"]
    for rule_file in yaml.safe_load(CONFIG.read_text())["rule_files"]:
        assert (PROMETHEUS_DIR / rule_file).is_file(), rule_file
