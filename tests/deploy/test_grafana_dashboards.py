"""Grafana: provisioning files and dashboard JSON, against the metrics contract.

Grafana itself is not packaged for Debian, so the dashboards are checked as data: valid
JSON of the shape Grafana provisions; dashboards that travel (every panel bound to a
``$datasource`` variable, not to a datasource uid, and filtered by ``$instance`` and, for
per-shard metrics, ``$shard``); every panel with a unit; every query selecting only
contract metrics, and every contract metric shown.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.deploy.contract import ALL_METRICS, queryable_names, sample_metrics
from tests.deploy.support import (
    GRAFANA_DIR,
    bind_mounts,
    promql_metric_names,
    service_env,
    services,
)

DASHBOARDS_DIR = GRAFANA_DIR / "dashboards"
DATASOURCES_FILE = GRAFANA_DIR / "provisioning" / "datasources" / "prometheus.yml"
PROVIDERS_FILE = GRAFANA_DIR / "provisioning" / "dashboards" / "dashboards.yml"
MIN_SCHEMA_VERSION = 39  # Grafana 10.3 / 11
GRID_WIDTH = 24
# Dashboards the product promises, by tag.
REQUIRED_TAGS = {"overview", "api", "scheduler", "executor", "resources"}
OVERVIEW_UID = "jobsvc-overview"
DATASOURCE = "${datasource}"
INSTANCE_MATCHER = 'instance=~"$instance"'
SHARD_MATCHER = 'shard=~"$shard"'
# A metric selector with its label matchers: name{...}.
SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}")
VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
GRAFANA_VARIABLES = {"__rate_interval", "__interval", "__range"}
NO_UNIT = {None, "", "none"}
QUEUE_LAG = "jobsvc_oldest_due_job_age_seconds"


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARDS_DIR.glob("*.json"))


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def dashboards() -> dict[str, dict]:
    return {path.name: load(path) for path in dashboard_files()}


def panels(dashboard: dict) -> list[dict]:
    """Every panel, including those inside collapsed rows."""
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def query_panels(dashboard: dict) -> list[dict]:
    return [panel for panel in panels(dashboard) if panel["type"] != "row"]


def variables(dashboard: dict) -> dict[str, dict]:
    return {variable["name"]: variable for variable in dashboard["templating"]["list"]}


def expressions(dashboard: dict) -> list[tuple[str, str]]:
    return [
        (panel["title"], target["expr"])
        for panel in query_panels(dashboard)
        for target in panel["targets"]
    ]


# ---- provisioning -----------------------------------------------------------------------------


def test_the_datasource_is_the_compose_prometheus_and_the_default():
    """The dashboards' $datasource variable picks the default Prometheus datasource."""
    (datasource,) = yaml.safe_load(DATASOURCES_FILE.read_text())["datasources"]
    assert datasource["type"] == "prometheus"
    assert datasource["url"] == "http://prometheus:9090"
    assert datasource["isDefault"] is True
    assert "prometheus" in services()


def test_the_dashboard_provider_reads_where_compose_mounts_the_dashboards():
    (provider,) = yaml.safe_load(PROVIDERS_FILE.read_text())["providers"]
    mounts = dict(bind_mounts(services()["grafana"]))
    assert mounts["./deploy/grafana/dashboards"] == provider["options"]["path"]
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"


def test_the_overview_is_grafanas_home_dashboard():
    home = service_env(services()["grafana"])["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    (provider,) = yaml.safe_load(PROVIDERS_FILE.read_text())["providers"]
    directory, _, file_name = home.rpartition("/")
    assert directory == provider["options"]["path"]
    assert load(DASHBOARDS_DIR / file_name)["uid"] == OVERVIEW_UID


# ---- dashboards -------------------------------------------------------------------------------


def test_every_promised_dashboard_exists_once():
    tags = [tag for d in dashboards().values() for tag in d["tags"] if tag in REQUIRED_TAGS]
    assert sorted(tags) == sorted(REQUIRED_TAGS)
    uids = [d["uid"] for d in dashboards().values()]
    assert len(uids) == len(set(uids))
    assert OVERVIEW_UID in uids


@pytest.mark.parametrize("path", dashboard_files(), ids=lambda path: path.name)
def test_dashboard_has_the_provisioned_shape(path):
    dashboard = load(path)
    assert dashboard["schemaVersion"] >= MIN_SCHEMA_VERSION
    assert dashboard["title"] and dashboard["uid"] and len(dashboard["uid"]) <= 40
    assert "jobsvc" in dashboard["tags"]
    assert "id" not in dashboard or dashboard["id"] is None, "a provisioned file has no id"
    ids = [panel["id"] for panel in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


@pytest.mark.parametrize("path", dashboard_files(), ids=lambda path: path.name)
def test_panels_fit_the_grid_without_overlapping(path):
    taken: dict[tuple[int, int], str] = {}
    for panel in load(path)["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= GRID_WIDTH, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in taken, f"{panel['title']} overlaps {taken[(x, y)]}"
                taken[(x, y)] = panel["title"]


@pytest.mark.parametrize("path", dashboard_files(), ids=lambda path: path.name)
def test_every_panel_queries_the_datasource_the_importer_chooses(path):
    """No datasource uid is written in: a dashboard imported into another Grafana asks for
    its Prometheus ($datasource) instead of failing quietly."""
    dashboard = load(path)
    datasource = variables(dashboard)["datasource"]
    assert (datasource["type"], datasource["query"]) == ("datasource", "prometheus")
    for panel in query_panels(dashboard):
        assert panel["datasource"] == {"type": "prometheus", "uid": DATASOURCE}, panel["title"]
        assert panel["targets"], f"{panel['title']} has no query"
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": DATASOURCE}
            assert target["expr"].strip(), panel["title"]
    for variable in variables(dashboard).values():
        if variable["type"] == "query":
            assert variable["datasource"]["uid"] == DATASOURCE, variable["name"]


@pytest.mark.parametrize("path", dashboard_files(), ids=lambda path: path.name)
def test_every_query_is_filtered_by_instance_and_per_shard_metrics_by_shard(path):
    dashboard = load(path)
    metrics = sample_metrics()
    for title, expr in expressions(dashboard):
        selected = [m for m in SELECTOR.finditer(expr) if m.group(1) in metrics]
        assert len(selected) == len(promql_metric_names_all(expr)), f"{title}: a bare metric"
        for match in selected:
            name, matchers = match.groups()
            assert INSTANCE_MATCHER in matchers, f"{title}: {name} is not filtered by $instance"
            if metrics[name] is not None and "shard" in metrics[name].labels:
                assert SHARD_MATCHER in matchers, f"{title}: {name} is not filtered by $shard"


@pytest.mark.parametrize("path", dashboard_files(), ids=lambda path: path.name)
def test_the_variables_the_queries_use_are_defined_and_select_all_by_default(path):
    dashboard = load(path)
    defined = variables(dashboard)
    used = {
        first or second
        for _, expr in expressions(dashboard)
        for first, second in VARIABLE.findall(expr)
    } - GRAFANA_VARIABLES
    assert "instance" in used
    assert used <= set(defined), f"undefined: {sorted(used - set(defined))}"
    for name in used:
        variable = defined[name]
        assert variable["type"] == "query", name
        assert (variable["includeAll"], variable["multi"], variable["allValue"]) == (
            True,
            True,
            ".*",
        ), name
        assert variable["current"]["value"] == ["$__all"], name
    for link in dashboard["links"]:
        assert link["includeVars"], "links to the other dashboards keep the chosen variables"


@pytest.mark.parametrize("path", dashboard_files(), ids=lambda path: path.name)
def test_every_panel_has_a_unit(path):
    for panel in query_panels(load(path)):
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        assert unit not in NO_UNIT, f"{panel['title']} has no unit"


def test_the_queue_lag_is_shown_per_shard_in_seconds():
    for uid in (OVERVIEW_UID, "jobsvc-scheduler"):
        dashboard = next(d for d in dashboards().values() if d["uid"] == uid)
        [panel] = [
            panel
            for panel in query_panels(dashboard)
            if any(QUEUE_LAG in target["expr"] for target in panel["targets"])
        ]
        assert panel["fieldConfig"]["defaults"]["unit"] == "s"
        assert all("by (shard)" in target["expr"] for target in panel["targets"]), uid


def promql_metric_names_all(expr: str) -> list[str]:
    """Every metric selected, once per selector (promql_metric_names gives a set)."""
    names = promql_metric_names(expr)
    stripped = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    return [
        match.group(0)
        for match in re.finditer(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b", stripped)
        if match.group(0) in names
    ]


@pytest.mark.parametrize("path", dashboard_files(), ids=lambda path: path.name)
def test_every_query_selects_only_contract_metrics(path):
    known = queryable_names()
    for panel in query_panels(load(path)):
        for target in panel["targets"]:
            names = promql_metric_names(target["expr"])
            assert names, f"{panel['title']}: {target['expr']} selects no metric"
            assert names <= known, f"{panel['title']}: {sorted(names - known)} not in contract"


def test_every_contract_metric_is_on_a_dashboard():
    shown = {
        name
        for dashboard in dashboards().values()
        for panel in query_panels(dashboard)
        for target in panel["targets"]
        for name in promql_metric_names(target["expr"])
    }
    missing = [m.name for m in ALL_METRICS if not m.sample_names() & shown]
    assert not missing, f"no panel shows {missing}"


def test_the_overview_shows_job_latency_against_the_10_second_line():
    overview = next(d for d in dashboards().values() if d["uid"] == OVERVIEW_UID)
    latency_panels = [
        panel
        for panel in query_panels(overview)
        if any("jobsvc_job_latency_seconds_bucket" in t["expr"] for t in panel["targets"])
        and panel["type"] == "timeseries"
    ]
    assert latency_panels
    for panel in latency_panels:
        defaults = panel["fieldConfig"]["defaults"]
        assert defaults["custom"]["thresholdsStyle"]["mode"] != "off"
        assert 10 in [step["value"] for step in defaults["thresholds"]["steps"]]
