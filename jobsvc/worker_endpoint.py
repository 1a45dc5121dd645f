"""The HTTP endpoint of a worker process: ``/metrics``, ``/healthz`` and ``/readyz``.

``/metrics`` is Prometheus' exposition (what ``prometheus_client.start_http_server``
serves); ``/healthz`` answers 200 while the process serves at all (a liveness probe);
``/readyz`` answers 200 while the worker can do its work, and 503 with the reasons when it
cannot (a readiness probe, an alert, an operator's ``curl``), e.g. a scheduler whose
dispatch rounds for an owned shard have all failed for longer than a bound.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

Readiness = Callable[[], list[str]]  # what keeps the worker from its work; empty: ready


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """Scrapes every few seconds would flood the worker's log."""


def serve_worker_endpoint(*, port: int, readiness: Readiness, address: str) -> _Server:
    """Serve the endpoint on ``address`` (JOBSVC_WORKER_METRICS_BIND: loopback unless the
    deployment says otherwise) on a daemon thread; the server is returned for
    ``shutdown()``."""
    server = make_server(
        address, port, _application(readiness), server_class=_Server, handler_class=_QuietHandler
    )
    threading.Thread(target=server.serve_forever, name="worker-endpoint", daemon=True).start()
    return server


def _application(readiness: Readiness):
    metrics = make_wsgi_app()

    def application(environ: dict, start_response: Callable) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            return _json(start_response, "200 OK", {"alive": True})
        if path == "/readyz":
            problems = readiness()
            if problems:
                return _json(
                    start_response,
                    "503 Service Unavailable",
                    {"ready": False, "problems": problems},
                )
            return _json(start_response, "200 OK", {"ready": True})
        return metrics(environ, start_response)

    return application


def _json(start_response: Callable, status: str, body: dict) -> list[bytes]:
    payload = json.dumps(body).encode()
    start_response(
        status, [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))]
    )
    return [payload]
