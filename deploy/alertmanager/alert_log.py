"""An example Alertmanager webhook receiver: each alert it is sent, as a JSON line on stdout.

docker-compose.yml runs it as the service ``alert-log`` (the python image, this file
mounted), so that the alerts Alertmanager sends reach something you can read:
``docker compose logs -f alert-log``. Standard library only. Alertmanager POSTs its
webhook payload (version 4) to ``/alerts``; ``/healthz`` answers 200.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO

PORT = 9095
MAX_BODY_BYTES = 1024 * 1024  # Alertmanager's payloads are a few KiB per alert


def alert_lines(payload: dict[str, Any]) -> list[str]:
    """One JSON line per alert of a webhook payload: what an operator reads first."""
    lines = []
    for alert in payload.get("alerts") or []:
        labels = alert.get("labels") or {}
        annotations = alert.get("annotations") or {}
        line = {
            "status": alert.get("status"),
            "alertname": labels.get("alertname"),
            "severity": labels.get("severity"),
            "summary": annotations.get("summary"),
            "runbook_url": annotations.get("runbook_url"),
            "starts_at": alert.get("startsAt"),
            "ends_at": alert.get("endsAt"),
            "labels": labels,
        }
        lines.append(json.dumps(line, sort_keys=True))
    return lines


def handler_class(out: TextIO) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if self.path != "/alerts" or not 0 < length <= MAX_BODY_BYTES:
                self.send_error(404 if self.path != "/alerts" else 400)
                return
            try:
                payload = json.loads(self.rfile.read(length))
            except ValueError:
                self.send_error(400, "not JSON")
                return
            for line in alert_lines(payload if isinstance(payload, dict) else {}):
                print(line, file=out, flush=True)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/healthz" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            """Health checks every few seconds would drown the alerts."""

    return Handler


def main() -> None:
    server = ThreadingHTTPServer(("0.0.0.0", PORT), handler_class(sys.stdout))
    server.serve_forever()


if __name__ == "__main__":
    main()
