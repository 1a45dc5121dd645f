"""Keep-alive HTTP to the jobsvc API, one connection per sending thread (``http.client``).

A request either returns an ``ApiResponse`` (any status; the caller decides what counts
as an error; a body that is not JSON reads as None) or raises ``ConnectionFailed`` (no
answer: refused, reset, timed out). After a failure the next request reconnects.
"""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tools.loadgen.errors import LoadgenError

REQUEST_TIMEOUT_SECONDS = 30.0
# gunicorn closes a keep-alive connection idle for 5 s (deploy/gunicorn.conf.py): reopen
# before that rather than send into a connection the server is closing.
IDLE_RECONNECT_SECONDS = 4.0


class ConnectionFailed(LoadgenError):
    """The request got no usable answer."""


@dataclass(frozen=True)
class ApiResponse:
    status: int
    body: Any  # decoded JSON, or None for an empty body
    seconds: float  # request round trip

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class ApiClient:
    """Not thread-safe: give each thread its own."""

    def __init__(self, base_url: str, *, timeout: float = REQUEST_TIMEOUT_SECONDS) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise LoadgenError(f"not an http(s) URL: {base_url!r}")
        self._connection_class = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._timeout = timeout
        self._connection: http.client.HTTPConnection | None = None
        self._last_used = 0.0

    def post(self, path: str, payload: Any, *, token: str | None = None) -> ApiResponse:
        body = json.dumps(payload, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return self.request("POST", path, body=body, headers=headers)

    def get(self, path: str) -> ApiResponse:
        return self.request("GET", path, body=None, headers={"Accept": "application/json"})

    def request(
        self, method: str, path: str, *, body: bytes | None, headers: dict[str, str]
    ) -> ApiResponse:
        started = time.monotonic()
        if self._connection is not None and started - self._last_used > IDLE_RECONNECT_SECONDS:
            self.close()
        if self._connection is None:
            self._connection = self._connection_class(self._host, self._port, timeout=self._timeout)
        try:
            self._connection.request(method, self._prefix + path, body=body, headers=headers)
            response = self._connection.getresponse()
            raw = response.read()
            if response.will_close:
                self.close()
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise ConnectionFailed(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        self._last_used = time.monotonic()
        return ApiResponse(response.status, _json_or_none(raw), self._last_used - started)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None
