"""The http handler's target in tests, benchmarks and the chaos campaign: a real HTTP
server that records every delivery (job id, attempt, Idempotency-Key, arrival time, and
whether its Standard Webhooks signature holds, when it is told each user's secret).

One receiver serves many users here, so it reads the ``user_id`` of the body to pick the
secret (``secret_of(user_id)``, asked once per user), then verifies the raw bytes. A real
receiver holds its own user's secret and verifies before parsing anything.

It answers 200 unless told otherwise: per job, which status codes to answer, in order
(``answer``), and how long to stall before answering (``stall``), so tests can make
attempts fail, time out or succeed. ``hold`` keeps every delivery that arrives waiting,
unanswered, until ``release``: handlers that do not finish until a test says so.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from jobsvc.handlers.signing import verify

# The http handler refuses loopback and private addresses unless told otherwise: the API
# and the workers need these to send jobs to a receiver on 127.0.0.1.
LOOPBACK_WEBHOOKS = {
    "JOBSVC_HTTP_HANDLER_ALLOWED_HOSTS": "127.0.0.1:*",  # the receivers' ports are random
    "JOBSVC_HTTP_HANDLER_ALLOW_PRIVATE_ADDRESSES": "true",
}


@dataclass(frozen=True, eq=False)
class Delivery:
    job_id: str
    attempt: int
    idempotency_key: str
    at: float  # Unix seconds, when the request arrived
    status: int = 200  # what the receiver answered
    signature_valid: bool | None = None  # None: the receiver was not given the secrets
    body: dict = field(default_factory=dict)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default listen backlog is 5: two executors' handler threads
    # connecting at once on a loaded machine overflowed it, and a reset connection made
    # the http handler retry a job (attempt 2) in tests that expect one attempt.
    request_queue_size = 256


class Receiver:
    def __init__(self, *, secret_of: Callable[[int], str] | None = None) -> None:
        """``secret_of(user_id)``: that user's webhook secret (``whsec_...``); None: the
        signatures are not checked."""
        self._secret_of = secret_of
        self._secrets: dict[int, str] = {}
        self._deliveries: list[Delivery] = []
        self._scripts: dict[str, list[int]] = defaultdict(list)
        self._stalls: dict[str, float] = {}
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._released.set()
        self._held = 0  # deliveries waiting for release() now
        self._server = _Server(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook"

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def answer(self, job_id: str, *statuses: int) -> None:
        """Answer these statuses to the job's next deliveries, then 200."""
        with self._lock:
            self._scripts[job_id].extend(statuses)

    def stall(self, job_id: str, seconds: float) -> None:
        """Wait this long before answering each delivery of the job."""
        with self._lock:
            self._stalls[job_id] = seconds

    def hold(self) -> None:
        """Keep every delivery that arrives from now on unanswered until ``release()``."""
        self._released.clear()

    def release(self) -> None:
        """Let the deliveries held go on (each is recorded when it is answered)."""
        self._released.set()

    def held(self) -> int:
        """Deliveries waiting for ``release()`` now."""
        with self._lock:
            return self._held

    def deliveries(self) -> list[Delivery]:
        with self._lock:
            return list(self._deliveries)

    def count_by_job(self) -> Counter:
        with self._lock:
            return Counter(delivery.job_id for delivery in self._deliveries)

    def of(self, job_id: str) -> list[Delivery]:
        with self._lock:
            return [delivery for delivery in self._deliveries if delivery.job_id == job_id]

    def _record(self, raw: bytes, headers) -> int:
        """Record one delivery; the status to answer (after the stall, if any)."""
        at = time.time()
        if not self._released.is_set():
            with self._lock:
                self._held += 1
            self._released.wait()
            with self._lock:
                self._held -= 1
        body = json.loads(raw)
        job_id = body.get("job_id", "")
        with self._lock:
            script = self._scripts.get(job_id)
            status = script.pop(0) if script else 200
            stall = self._stalls.get(job_id, 0.0)
        if stall:
            time.sleep(stall)  # the slow endpoint under test, not synchronisation
        valid = None
        if self._secret_of is not None:
            valid = verify(
                secret=self._secret(int(body.get("user_id", 0))),
                headers=dict(headers.items()),
                body=raw,
                now=time.time(),
            )
        delivery = Delivery(
            job_id=job_id,
            attempt=int(body.get("attempt", 0)),
            idempotency_key=headers.get("Idempotency-Key", ""),
            at=at,
            status=status,
            signature_valid=valid,
            body=body,
        )
        with self._lock:
            self._deliveries.append(delivery)
        return status

    def _secret(self, user_id: int) -> str:
        with self._lock:
            known = self._secrets.get(user_id)
        if known is None:
            known = self._secret_of(user_id)
            with self._lock:
                self._secrets[user_id] = known
        return known

    def _handler_class(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(receiver._record(raw, self.headers))
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        return Handler
