"""Alerts reach someone: compose runs Alertmanager, Prometheus sends to it, and its example
webhook receiver (deploy/alertmanager/alert_log.py) logs every alert it is sent.

amtool is not packaged with Debian's prometheus, so the Alertmanager configuration is
checked as data: every receiver a route names exists, and the webhook goes to the
compose service and port that run the example receiver.
"""

from __future__ import annotations

import importlib.util
import io
import json
import threading
import urllib.error
import urllib.request
from http.server import ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
import yaml

from tests.deploy.support import REPO, bind_mounts, services

ALERTMANAGER_DIR = REPO / "deploy" / "alertmanager"
CONFIG = ALERTMANAGER_DIR / "alertmanager.yml"
PROMETHEUS_CONFIG = REPO / "deploy" / "prometheus" / "prometheus.yml"


def alert_log_module():
    spec = importlib.util.spec_from_file_location("alert_log", ALERTMANAGER_DIR / "alert_log.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def config() -> dict:
    return yaml.safe_load(CONFIG.read_text())


def routes(route: dict) -> list[dict]:
    return [route, *(found for child in route.get("routes", []) for found in routes(child))]


def test_compose_runs_a_pinned_alertmanager_on_this_config():
    alertmanager = services()["alertmanager"]
    assert alertmanager["image"].startswith("prom/alertmanager:v")
    assert dict(bind_mounts(alertmanager))["./deploy/alertmanager"] == "/etc/alertmanager"
    assert "--config.file=/etc/alertmanager/alertmanager.yml" in alertmanager["command"]
    assert all(str(port).startswith("127.0.0.1:") for port in alertmanager["ports"])


def test_prometheus_sends_its_alerts_to_the_compose_alertmanager():
    [manager] = yaml.safe_load(PROMETHEUS_CONFIG.read_text())["alerting"]["alertmanagers"]
    [target] = [t for static in manager["static_configs"] for t in static["targets"]]
    host, port = target.rsplit(":", 1)
    assert host == "alertmanager"
    assert f":{port}/-/ready" in " ".join(services()[host]["healthcheck"]["test"])


def test_every_route_goes_to_a_receiver_that_exists():
    receivers = {receiver["name"] for receiver in config()["receivers"]}
    for route in routes(config()["route"]):
        assert route["receiver"] in receivers


def test_the_example_webhook_goes_to_the_service_running_the_example_receiver():
    [webhook] = [
        hook for receiver in config()["receivers"] for hook in receiver.get("webhook_configs", [])
    ]
    url = urlsplit(webhook["url"])
    assert url.hostname == "alert-log"
    assert url.port == alert_log_module().PORT
    assert url.path == "/alerts"
    alert_log = services()["alert-log"]
    assert "/srv/alert_log.py" in alert_log["command"]
    assert dict(bind_mounts(alert_log))["./deploy/alertmanager/alert_log.py"] == (
        "/srv/alert_log.py"
    )


# Alertmanager's webhook payload (version 4), as it sends one alert of the rules.
PAYLOAD = {
    "version": "4",
    "status": "firing",
    "receiver": "webhook",
    "groupLabels": {"alertname": "QueueLagHigh", "shard": "1"},
    "alerts": [
        {
            "status": "firing",
            "labels": {"alertname": "QueueLagHigh", "severity": "critical", "shard": "1"},
            "annotations": {
                "summary": "Shard 1: the oldest due job has waited 2m",
                "runbook_url": "docs/runbooks/QueueLagHigh.md",
            },
            "startsAt": "2030-01-01T00:00:00Z",
            "endsAt": "0001-01-01T00:00:00Z",
        }
    ],
}


@pytest.fixture
def alert_log():
    module = alert_log_module()
    out = io.StringIO()
    server = ThreadingHTTPServer(("127.0.0.1", 0), module.handler_class(out))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", out
    server.shutdown()
    server.server_close()


def test_the_example_receiver_logs_each_alert_it_is_sent(alert_log):
    url, out = alert_log
    request = urllib.request.Request(
        f"{url}/alerts",
        data=json.dumps(PAYLOAD).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )

    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200
    with urllib.request.urlopen(f"{url}/healthz", timeout=5) as response:
        assert response.status == 200

    [line] = out.getvalue().splitlines()
    logged = json.loads(line)
    assert (logged["alertname"], logged["severity"], logged["status"]) == (
        "QueueLagHigh",
        "critical",
        "firing",
    )
    assert logged["runbook_url"] == "docs/runbooks/QueueLagHigh.md"


def test_the_example_receiver_refuses_what_is_not_an_alert(alert_log):
    url, out = alert_log
    request = urllib.request.Request(f"{url}/alerts", data=b"not json", method="POST")

    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 400
    assert out.getvalue() == ""
