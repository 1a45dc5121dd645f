"""Every Grafana panel shows data after a short load on a running cluster.

Grafana is not packaged for Debian, so its queries are run where it would run them: the API
(gunicorn), two schedulers and two executors serve metrics, a real Prometheus scrapes them
every second, a short load goes through the API (a failed log-in, jobs that succeed, one
retried and dead-lettered, a 404), and then every query of every panel in
deploy/grafana/dashboards must return at least one series with a number (not NaN), with the
dashboard's variables substituted as Grafana does: ``$instance`` and ``$shard`` by their
"All" value, and once more by one scheduler's instance and one shard it owns. The queries
that legitimately stay empty without a fault are listed in EMPTY_WITHOUT_A_FAULT, each with
the reason.
"""

from __future__ import annotations

import json
import math
import shutil
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest

from jobsvc_client import AuthError, Client, JobSpec, NotFound
from tests.conftest import DEFAULT_PASSWORD
from tests.deploy.support import GRAFANA_DIR, REPO
from tests.served_api import serving_api
from tests.waiting import wait_until
from tools.devstack.apps import METRICS_PORT_ENV
from tools.devstack.ports import LOOPBACK, free_port
from tools.devstack.process import ManagedProcess
from tools.devstack.prometheus import ALERT_RULES, LocalPrometheus, ScrapeTarget

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

RATE_INTERVAL = "1m"  # what Grafana's $__rate_interval stands for here (1 s scrapes)
ALL = ".*"  # the dashboards' variables' allValue: Grafana's "All"
# Gauges the scheduler owning a shard always reports for it.
OWNER_GAUGES = (
    "jobsvc_shard_owned",
    "jobsvc_due_backlog_jobs",
    "jobsvc_oldest_due_job_age_seconds",
)
SUCCEEDING_JOBS = 200
LOAD_SPREAD = timedelta(milliseconds=25)  # between due times: the load lasts 5 s
EMPTY_WITHOUT_A_FAULT = {
    # API 5xx per route: only a server error makes a series; the 5xx stats use `or vector(0)`.
    'sum by (route, status) (rate(jobsvc_http_requests_total{job="jobsvc-api",'
    'status=~"5..",instance=~"$instance"}[$__rate_interval]))': (
        "only a 5xx answer creates the series"
    ),
    # The sweeper recovers jobs only after a lost message or a dead executor.
    'sum by (reason) (increase(jobsvc_jobs_swept_total{job="jobsvc-scheduler",'
    'instance=~"$instance"}[$__rate_interval]))': (
        "only a lost message or executor makes the sweeper recover a job"
    ),
    # Throttled requests per route: only a 429 makes a series.
    'sum by (route) (rate(jobsvc_http_requests_total{job="jobsvc-api",status="429",'
    'instance=~"$instance"}[$__rate_interval])) * 60': (
        "only a throttled request creates the series"
    ),
}


def dashboard_queries() -> list[tuple[str, str, str]]:
    """(dashboard file, panel title, expression) of every query of every panel."""
    queries = []
    for path in sorted((GRAFANA_DIR / "dashboards").glob("*.json")):
        dashboard = json.loads(path.read_text())
        stack = list(dashboard["panels"])
        while stack:
            panel = stack.pop(0)
            stack.extend(panel.get("panels", []))
            for target in panel.get("targets", []):
                if target.get("expr"):
                    queries.append((path.name, panel["title"], target["expr"]))
    return queries


def substituted(expr: str, *, instance: str = ALL, shard: str = ALL) -> str:
    """The expression as Grafana sends it, with these values of the variables."""
    return (
        expr.replace("$__rate_interval", RATE_INTERVAL)
        .replace("$instance", instance)
        .replace("$shard", shard)
    )


def _query(prometheus: LocalPrometheus, expr: str) -> list[dict]:
    promql = substituted(expr)
    assert "$" not in promql, f"a variable the test does not substitute: {expr}"
    url = f"{prometheus.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


def _has_data(prometheus: LocalPrometheus, expr: str) -> bool:
    return any(not math.isnan(float(s["value"][1])) for s in _query(prometheus, expr))


@pytest.fixture
def prometheus_for(tmp_path):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus not found: `make bootstrap` installs Debian's package")
    processes = []

    def start(targets: list[ScrapeTarget]) -> LocalPrometheus:
        prometheus = LocalPrometheus(
            root=tmp_path / "prometheus",
            port=free_port(),
            targets=targets,
            rule_files=[REPO / ALERT_RULES],
            binary=binary,
            scrape_interval="1s",
        )
        prometheus.prepare()
        process = ManagedProcess(
            name="prometheus", argv=prometheus.argv(), log_path=tmp_path / "prometheus.log"
        )
        process.start()
        processes.append(process)
        wait_until(prometheus.is_ready, timeout=30, what="prometheus is ready")
        return prometheus

    yield start
    for process in processes:
        process.stop(timeout=10)


def test_every_dashboard_query_returns_data_after_a_short_load(
    make_user, start_worker, messaging, receiver, prometheus_for
):
    targets = []
    for kind, name in [("scheduler", f"scheduler-{n}") for n in range(2)] + [
        ("executor", f"executor-{n}") for n in range(2)
    ]:
        port = free_port()
        start_worker(kind, name, env={METRICS_PORT_ENV[kind]: str(port)})
        targets.append(ScrapeTarget(f"jobsvc-{kind}", name, f"{LOOPBACK}:{port}"))
    user = make_user()
    with serving_api(env=messaging.env) as base:
        api_address = base.removeprefix("http://")
        prometheus = prometheus_for([ScrapeTarget("jobsvc-api", "api", api_address), *targets])
        # Rates need samples from before the load: every target scraped, then the load.
        wait_until(
            lambda: _has_data(prometheus, f"count(up == 1) == {len(targets) + 1}"),
            timeout=30,
            what="prometheus scraped every process once",
        )
        with pytest.raises(AuthError):  # a failed log-in, which its panel counts
            Client(base).login(username=user.username, password="not " + DEFAULT_PASSWORD)
        client = Client(base)
        client.login(username=user.username, password=DEFAULT_PASSWORD)
        now = datetime.now(UTC) + timedelta(seconds=1)
        failing = client.create_job(
            message="fails twice",
            execute_at=now + timedelta(seconds=2),
            handler="http",
            handler_params={"url": receiver.url},
            max_attempts=2,
        )
        receiver.answer(failing.id, 500, 500)
        for start in range(0, SUCCEEDING_JOBS, 50):
            client.create_jobs(
                [JobSpec(f"job {n}", now + n * LOAD_SPREAD) for n in range(start, start + 50)]
            )
        with pytest.raises(NotFound):
            client.get_job(failing.id[:-1] + ("A" if failing.id[-1] != "A" else "B"))
        wait_until(
            lambda: client.get_job(failing.id).status == "failed",
            timeout=60,
            what="the failing job was retried and failed",
        )
        wait_until(
            lambda: (
                _has_data(prometheus, "sum(jobsvc_jobs_dead_lettered_total) > 0")
                and _has_data(
                    prometheus, f"sum(jobsvc_jobs_processed_total) >= {SUCCEEDING_JOBS + 2}"
                )
            ),
            timeout=30,
            what="prometheus scraped the executors after the load",
        )

        queries = dashboard_queries()
        expected = [q for q in queries if q[2] not in EMPTY_WITHOUT_A_FAULT]
        empty: list[tuple[str, str, str]] = []

        def all_have_data() -> bool:
            empty[:] = [q for q in expected if not _has_data(prometheus, q[2])]
            return not empty

        try:
            wait_until(all_have_data, timeout=30, what="every dashboard query has data")
        except AssertionError:
            pytest.fail("queries without data:\n" + "\n".join(map(str, empty)))

        # One scheduler and a shard it owns chosen: the panels of what every owner reports
        # for its shards still show data.
        owned = _query(prometheus, "max by (instance, shard) (jobsvc_shard_owned == 1)")[0]
        one = {"instance": owned["metric"]["instance"], "shard": owned["metric"]["shard"]}
        scheduler_queries = [
            q
            for q in expected
            if q[0] == "scheduler.json" and any(name in q[2] for name in OWNER_GAUGES)
        ]
        assert len(scheduler_queries) >= len(OWNER_GAUGES)
        chosen_empty = [
            q for q in scheduler_queries if not _has_data(prometheus, substituted(q[2], **one))
        ]
        assert not chosen_empty, f"without data for {one}: {chosen_empty}"

    assert set(EMPTY_WITHOUT_A_FAULT) <= {q[2] for q in queries}, "an exception names no query"
    assert len(expected) >= 70
