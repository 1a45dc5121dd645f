"""A real HTTP server that the http handler delivers jobs to, recording every delivery.

Per job it can be told which status codes to answer, in order (then 200), and how long
to stall before answering, so tests can make attempts fail, time out or succeed.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from jobsvc.handlers.signing import verify


@dataclass(frozen=True)
class Delivery:
    job_id: str
    attempt: int
    idempotency_key: str
    signature_valid: bool
    status: int
    body: dict


class _Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: 16 handler threads connecting at once
    # on a loaded machine overflowed it, and a reset connection made the http handler
    # retry a job (attempt 2) in tests that expect one attempt.
    request_queue_size = 128


class Receiver:
    def __init__(self, *, secret: str) -> None:
        self.secret = secret
        self.deliveries: list[Delivery] = []
        self.scripts: dict[str, list[int]] = defaultdict(list)
        self.stalls: dict[str, float] = {}
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
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

    def answer(self, job_id: str, *statuses: int) -> None:
        """Answer these statuses to the job's next deliveries, then 200."""
        with self._lock:
            self.scripts[job_id].extend(statuses)

    def stall(self, job_id: str, seconds: float) -> None:
        with self._lock:
            self.stalls[job_id] = seconds

    def count_by_job(self) -> Counter:
        with self._lock:
            return Counter(delivery.job_id for delivery in self.deliveries)

    def of(self, job_id: str) -> list[Delivery]:
        with self._lock:
            return [delivery for delivery in self.deliveries if delivery.job_id == job_id]

    def _handler_class(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw)
                job_id = body.get("job_id", "")
                with receiver._lock:
                    script = receiver.scripts.get(job_id)
                    status = script.pop(0) if script else 200
                    stall = receiver.stalls.get(job_id, 0.0)
                if stall:
                    time.sleep(stall)  # the slow endpoint under test, not synchronisation
                valid = verify(
                    secret=receiver.secret.encode(),
                    body=raw,
                    now=time.time(),
                    timestamp=self.headers.get("X-Jobsvc-Timestamp", ""),
                    signature=self.headers.get("X-Jobsvc-Signature", ""),
                )
                with receiver._lock:
                    receiver.deliveries.append(
                        Delivery(
                            job_id=job_id,
                            attempt=body.get("attempt", 0),
                            idempotency_key=self.headers.get("Idempotency-Key", ""),
                            signature_valid=valid,
                            status=status,
                            body=body,
                        )
                    )
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        return Handler
