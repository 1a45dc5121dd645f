"""Liveness and readiness probes (no authentication, no envelope).

/healthz costs nothing and says nothing, so anyone may call it. /readyz queries every
database and names those that fail, so it answers only the networks that may read
/metrics (JOBSVC_METRICS_ALLOWED_NETWORKS: the orchestrator's and Prometheus's).
"""

from __future__ import annotations

import logging

from django.db import connections
from django.http import HttpRequest, JsonResponse

from jobsvc.api.errors import error_body
from jobsvc.metrics import peer_in_allowed_networks

logger = logging.getLogger(__name__)


def healthz(request: HttpRequest) -> JsonResponse:
    """The process is up and serving requests."""
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> JsonResponse:
    """Every database (control and shards) answers a query."""
    if not peer_in_allowed_networks(request):
        message = "Readiness is served only to the networks in JOBSVC_METRICS_ALLOWED_NETWORKS."
        return JsonResponse(error_body("forbidden", message), status=403)
    failures: dict[str, str] = {}
    for alias in connections:
        try:
            with connections[alias].cursor() as cursor:
                cursor.execute("SELECT 1")
        except Exception as exc:  # any failure means "not ready"; say which and why
            logger.warning("readiness: database %s unreachable: %s", alias, exc)
            failures[alias] = type(exc).__name__
            connections[alias].close()
    if failures:
        return JsonResponse({"status": "unavailable", "databases": failures}, status=503)
    return JsonResponse({"status": "ok", "databases": len(connections.all())})
