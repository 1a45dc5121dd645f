"""The client: creates jobs through the public API at a steady rate, on a thread.

Every create carries its own `Idempotency-Key` and is retried with that key while the
API does not answer (refused, timed out, 5xx, 429), so a create is never made twice;
only a create the API acknowledged (201, whether first answered or replayed) enters the
history. A create still unacknowledged after `GIVE_UP_SECONDS` is indeterminate (it may
exist) and counted apart. Half the jobs use the `http` handler (to the receiver), half
the no-op `default`.

With ``burst``, a fourth user also creates that many no-op jobs in one bulk request every
`BURST_EVERY_SECONDS`, all due at one instant `BURST_LEAD_SECONDS` later: a backlog that
both executors hold, also while one of them is paused or killed.
"""

from __future__ import annotations

import json
import random
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from tools.loadgen.client import ApiClient, ConnectionFailed

USERS = 3
REQUEST_TIMEOUT = 2.0  # seconds; a paused API must not hold the client for long
RETRY_PAUSE = 0.2  # seconds between retries of one create
GIVE_UP_SECONDS = 30.0  # a create unacknowledged this long is indeterminate
LEAD_SECONDS = (1.0, 4.0)  # execute_at is this far after the create (uniform)
JOB_TIMEOUT_SECONDS = 5  # per attempt: a killed executor's running lease is this + grace
BURST_EVERY_SECONDS = 5.0  # between two bulk requests of the burst user
BURST_LEAD_SECONDS = 2.0  # a burst's jobs are all due this long after its request


@dataclass(frozen=True)
class Created:
    job_id: str
    shard: int
    handler: str
    execute_at: float  # Unix seconds, as asked
    acknowledged_at: float


def sign_up(api_url: str, *, label: str) -> tuple[str, int]:
    """A new user of weight 1 (`chaos-<random>-<label>`): its token and id."""
    username, password = f"chaos-{uuid.uuid4().hex[:8]}-{label}", secrets.token_urlsafe(18)
    account = {"username": username, "password": password}
    client = ApiClient(api_url)  # password hashing: the default, longer timeout
    try:
        _must(client.post("/api/v1/users", {**account, "job_weight": 1}))
        login = _must(client.post("/api/v1/auth/login", account)).body["data"]
    finally:
        client.close()
    return login["token"], login["user"]["id"]


def _must(response):
    if not response.ok:
        raise RuntimeError(f"API answered {response.status}: {response.body}")
    return response


class Workload:
    def __init__(
        self, *, api_url: str, receiver_url: str, rate: float, seed: int, burst: int = 0
    ) -> None:
        self._client_url = api_url
        self._client = ApiClient(api_url, timeout=REQUEST_TIMEOUT)
        self._receiver_url = receiver_url
        self._interval = 1.0 / rate
        self._random = random.Random(seed)
        self._tokens: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(self._loop,), name="workload", daemon=True
        )
        self._burst = burst  # jobs per bulk request of the burst user; 0: none
        self._burst_token = ""
        self._burst_thread = threading.Thread(
            target=self._run, args=(self._bursts,), name="bursts", daemon=True
        )
        self.created: list[Created] = []
        self.indeterminate = 0  # create requests (a bulk one counts once)
        self.acks: list[float] = []  # when each acknowledged create was answered
        self.error: Exception | None = None  # what stopped the client, if anything did

    def start(self) -> Workload:
        self._tokens = [self._sign_up(n) for n in range(USERS)]
        self._thread.start()
        if self._burst:
            self._burst_token = self._sign_up(USERS)
            self._burst_thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=GIVE_UP_SECONDS + 5)
        if self._burst_thread.is_alive():
            self._burst_thread.join(timeout=GIVE_UP_SECONDS + 5)

    def _sign_up(self, n: int) -> str:
        return sign_up(self._client_url, label=str(n))[0]

    def _run(self, loop: Callable[[], None]) -> None:
        try:
            loop()
        except Exception as exc:  # reported by the runner, which then stops the campaign
            self.error = exc

    def _loop(self) -> None:
        n = 0
        while not self._stop.is_set():
            started = time.monotonic()
            self._create(n)
            n += 1
            self._stop.wait(max(0.0, self._interval - (time.monotonic() - started)))

    def _create(self, n: int) -> None:
        execute_at = time.time() + self._random.uniform(*LEAD_SECONDS)
        payload: dict = {
            "message": f"chaos {n}",
            "execute_at": datetime.fromtimestamp(execute_at, UTC).isoformat(),
            "timeout_seconds": JOB_TIMEOUT_SECONDS,
        }
        if n % 2 == 0:
            payload |= {"handler": "http", "handler_params": {"url": self._receiver_url}}
        self._post(self._client, payload, self._tokens[n % len(self._tokens)])

    def _bursts(self) -> None:
        client = ApiClient(self._client_url, timeout=REQUEST_TIMEOUT * 5)  # 1,000 jobs a request
        n = 0
        while not self._stop.wait(BURST_EVERY_SECONDS):
            execute_at = datetime.fromtimestamp(time.time() + BURST_LEAD_SECONDS, UTC)
            job = {
                "message": f"chaos burst {n}",
                "execute_at": execute_at.isoformat(),
                "timeout_seconds": JOB_TIMEOUT_SECONDS,
            }
            self._post(client, [job] * self._burst, self._burst_token)
            n += 1
        client.close()

    def _post(self, client: ApiClient, payload: dict | list, token: str) -> None:
        """Create ``payload`` (a job, or a list for a bulk request) with one Idempotency-Key,
        retried while the API does not answer; record its jobs once acknowledged."""
        body = json.dumps(payload).encode()
        headers = {
            "Content-Type": "application/json",
            "Authorization": f"Bearer {token}",
            "Idempotency-Key": uuid.uuid4().hex,
        }
        deadline = time.monotonic() + GIVE_UP_SECONDS
        while time.monotonic() < deadline and not self._stop.is_set():
            try:
                response = client.request("POST", "/api/v1/me/jobs", body=body, headers=headers)
            except ConnectionFailed:
                response = None
            if response is not None and response.ok:
                data = response.body["data"]
                now = time.time()
                self.acks.append(now)
                self.created.extend(
                    Created(
                        job_id=job["id"],
                        shard=job["shard_id"],
                        handler=job["handler"],
                        execute_at=datetime.fromisoformat(job["execute_at"]).timestamp(),
                        acknowledged_at=now,
                    )
                    for job in (data if isinstance(payload, list) else [data])
                )
                return
            if response is not None and response.status < 500 and response.status != 429:
                raise RuntimeError(f"create refused: {response.status} {response.body}")
            self._stop.wait(RETRY_PAUSE)
        self.indeterminate += 1
