"""Prometheus metrics of the API process, served at ``/metrics``.

Under gunicorn every worker is a separate process: ``deploy/gunicorn.conf.py`` sets
``PROMETHEUS_MULTIPROC_DIR`` so prometheus_client keeps the values in shared files and
``/metrics`` sums them over the workers. CPU and memory are reported for the whole
gunicorn process tree (master and workers).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from ipaddress import ip_address
from pathlib import Path

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from jobsvc.api.errors import error_body

_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
# Seconds; fine below 100 ms, where the API's p99 target lives.
_LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0)

HTTP_REQUESTS = Counter(
    "jobsvc_http_requests",
    "API requests by method, route and status",
    ["method", "route", "status"],
)
HTTP_LATENCY = Histogram(
    "jobsvc_http_request_duration_seconds",
    "API request latency by method and route",
    ["method", "route"],
    buckets=_LATENCY_BUCKETS,
)
JOBS_CREATED = Counter("jobsvc_jobs_created", "Jobs created through the API")
LOGINS_FAILED = Counter(
    "jobsvc_logins_failed",
    "Failed log-ins (unknown name, wrong password, inactive user), via the API or the admin",
    ["via"],
)

# The gunicorn master's pid, set by deploy/gunicorn.conf.py; else this process alone.
PROCESS_ROOT_ENV = "JOBSVC_METRICS_PROCESS_ROOT_PID"


class MetricsMiddleware:
    """Counts and times every request, labelled by the URL pattern that matched it."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = match.route if match is not None else "unmatched"
        method = request.method if request.method in _METHODS else "other"
        HTTP_REQUESTS.labels(method, route, str(response.status_code)).inc()
        HTTP_LATENCY.labels(method, route).observe(time.perf_counter() - started)
        return response


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus text exposition of this API (all gunicorn workers), to allowed networks."""
    if not peer_in_allowed_networks(request):
        message = "Metrics are served only to the networks in JOBSVC_METRICS_ALLOWED_NETWORKS."
        return JsonResponse(error_body("forbidden", message), status=403)
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(registry)
    else:
        from prometheus_client import REGISTRY

        registry = REGISTRY
    registry_output = generate_latest(registry)
    tree = generate_latest(_ProcessTreeRegistry())
    return HttpResponse(registry_output + tree, content_type=CONTENT_TYPE_LATEST)


def peer_in_allowed_networks(request: HttpRequest) -> bool:
    """Whether the connection's peer (never a forwarded header) may read the operators'
    endpoints: /metrics and /readyz (JOBSVC_METRICS_ALLOWED_NETWORKS)."""
    return _peer_may_read_metrics(request.META.get("REMOTE_ADDR", ""))


def _peer_may_read_metrics(remote_addr: str) -> bool:
    try:
        peer = ip_address(remote_addr.split("%", 1)[0])  # drop an IPv6 zone index
    except ValueError:
        return False
    if peer.version == 6 and peer.ipv4_mapped is not None:
        peer = peer.ipv4_mapped
    return any(peer in network for network in settings.METRICS_ALLOWED_NETWORKS)


class _ProcessTree:
    """CPU and resident memory of a process and its children, from /proc."""

    def collect(self) -> Iterator:
        root = int(os.environ.get(PROCESS_ROOT_ENV) or os.getpid())
        pids = [root, *_children(root)]
        ticks = os.sysconf("SC_CLK_TCK")
        page = os.sysconf("SC_PAGE_SIZE")
        cpu = rss = 0.0
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                cpu += (int(fields[11]) + int(fields[12])) / ticks
                rss += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
            except (OSError, IndexError, ValueError):
                continue  # the process exited meanwhile
        yield CounterMetricFamily(
            "process_cpu_seconds", "CPU time of the API's processes", value=cpu
        )
        yield GaugeMetricFamily(
            "process_resident_memory_bytes", "Resident memory of the API's processes", value=rss
        )


def _children(pid: int) -> list[int]:
    children: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            children.extend(int(c) for c in (task / "children").read_text().split())
    except OSError:
        pass
    return children


class _ProcessTreeRegistry(CollectorRegistry):
    def __init__(self) -> None:
        super().__init__(auto_describe=False)
        self.register(_ProcessTree())
