"""The http handler's target: a real HTTP server that answers 200 and records every
delivery (job id, attempt, Idempotency-Key, arrival time)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# The http handler refuses loopback and private addresses unless told otherwise: the API
# and the workers need these to send jobs to a receiver on 127.0.0.1.
LOOPBACK_WEBHOOKS = {
    "JOBSVC_HTTP_HANDLER_ALLOWED_HOSTS": "127.0.0.1",
    "JOBSVC_HTTP_HANDLER_ALLOW_PRIVATE_ADDRESSES": "true",
}


@dataclass(frozen=True)
class Delivery:
    job_id: str
    attempt: int
    idempotency_key: str
    at: float  # Unix seconds, when the request arrived


class Receiver:
    def __init__(self) -> None:
        self._deliveries: list[Delivery] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                at = time.time()
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                delivery = Delivery(
                    job_id=body.get("job_id", ""),
                    attempt=int(body.get("attempt", 0)),
                    idempotency_key=self.headers.get("Idempotency-Key", ""),
                    at=at,
                )
                with receiver._lock:
                    receiver._deliveries.append(delivery)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 256  # two executors' handler threads connect at once

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook"

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def deliveries(self) -> list[Delivery]:
        with self._lock:
            return list(self._deliveries)
