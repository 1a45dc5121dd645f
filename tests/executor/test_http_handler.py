"""The http handler against a real HTTP server on 127.0.0.1: signing, outcomes, time limits.

The server answers by path: ``/status/<code>``, ``/redirect`` (302 to ``/target``),
``/hang`` (reads the request, then answers nothing until the test ends) and ``/trickle``
(sends a status line, then one header byte at a time, never finishing).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks.webhooks import Webhook

from jobsvc.handlers.base import JobContext
from jobsvc.handlers.errors import (
    HandlerTimeout,
    InvalidHandlerParams,
    PermanentError,
    RetryableError,
)
from jobsvc.handlers.http import HttpHandler
from jobsvc.handlers.signing import verify

KEY = b"test-secret-of-at-least-32-bytes!!"
SECRET = "whsec_" + base64.b64encode(KEY).decode()  # user 7's
NOW = 1_767_225_600  # the handler's wall clock, for webhook-timestamp


def secrets_of(user_id: int) -> list[str]:
    assert user_id == 7, "the delivery is signed with its owner's secret"
    return [SECRET]


TIME_LIMIT = 3.0  # seconds a timing-out test may take at most (its timeouts are ~0.3 s)
TRICKLE_INTERVAL = 0.05  # seconds between the bytes of /trickle


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Responder)
        self.received: list[Received] = []
        self.release = threading.Event()  # set at teardown: hanging requests may end

    def handle_error(self, request, client_address) -> None:
        pass  # the client gave up on /hang or /trickle: a broken pipe is expected


class _Responder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.received.append(Received(self.command, self.path, dict(self.headers), body))
        route = self.path.partition("?")[0]
        if route == "/hang":
            self.server.release.wait()
        elif route == "/trickle":
            self._trickle()
        elif route == "/redirect":
            self._answer(302, Location="/target")
        elif route.startswith("/status/"):
            code = int(route.removeprefix("/status/"))
            self._answer(code, **({"Retry-After": "7"} if code in (429, 503) else {}))
        else:
            self._answer(200)

    do_GET = do_POST  # a followed redirect would arrive as a GET

    def _answer(self, code: int, **headers: str) -> None:
        self.send_response(code)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _trickle(self) -> None:
        self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        self.wfile.flush()
        # Pacing, not synchronisation: each byte comes well within any socket timeout.
        while not self.server.release.wait(TRICKLE_INTERVAL):
            self.wfile.write(b"a")
            self.wfile.flush()

    def log_message(self, format, *args) -> None:
        pass


def _serve(server: _Server) -> Iterator[_Server]:
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def server() -> Iterator[_Server]:
    yield from _serve(_Server())


@pytest.fixture
def handler() -> HttpHandler:
    return HttpHandler(
        signing_secrets=secrets_of,
        allowed_hosts=["127.0.0.1:*"],
        allow_private_addresses=True,
        wall_clock=lambda: NOW + 0.7,
    )


def url(server: _Server, path: str, *, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{server.server_address[1]}{path}"


def job(target: str, *, timeout: float = 10.0, attempt: int = 2) -> JobContext:
    return JobContext(
        job_id="2bH5Yk3sQeM1pZ0x9LwVnR4tUa7",
        user_id=7,
        shard_id=1,
        attempt=attempt,
        message="héllo, wörld",
        params={"url": target},
        deadline=time.monotonic() + timeout,
    )


# --- The request ---------------------------------------------------------------------------


def test_the_delivery_is_signed_with_its_owners_secret_in_the_standard_format(server, handler):
    handler.handle(job(url(server, "/status/200")))

    [request] = server.received
    headers = {name.lower(): value for name, value in request.headers.items()}
    assert headers["webhook-id"] == "2bH5Yk3sQeM1pZ0x9LwVnR4tUa7_2"  # job and attempt
    assert headers["webhook-timestamp"] == str(NOW)
    signed = f"2bH5Yk3sQeM1pZ0x9LwVnR4tUa7_2.{NOW}.".encode() + request.body
    expected = base64.b64encode(hmac.new(KEY, signed, hashlib.sha256).digest()).decode()
    assert headers["webhook-signature"] == f"v1,{expected}"
    assert verify(secret=SECRET, headers=request.headers, body=request.body, now=NOW + 5)
    assert not verify(secret=SECRET, headers=request.headers, body=request.body + b" ", now=NOW + 5)


def test_a_live_delivery_verifies_with_the_standard_webhooks_library(server):
    live = HttpHandler(
        signing_secrets=secrets_of, allowed_hosts=["127.0.0.1:*"], allow_private_addresses=True
    )

    live.handle(job(url(server, "/status/200")))

    [request] = server.received
    body = Webhook(SECRET).verify(request.body, request.headers)
    assert body["job_id"] == "2bH5Yk3sQeM1pZ0x9LwVnR4tUa7"
    assert body["user_id"] == 7


def test_the_job_is_posted_as_json_with_the_jobs_idempotency_key(server, handler):
    target = url(server, "/status/200?token=abc")

    handler.handle(job(target, attempt=3))

    [request] = server.received
    assert (request.method, request.path) == ("POST", "/status/200?token=abc")
    assert request.headers["Content-Type"] == "application/json; charset=utf-8"
    assert request.headers["Idempotency-Key"] == "2bH5Yk3sQeM1pZ0x9LwVnR4tUa7"
    assert request.headers["Host"] == f"127.0.0.1:{server.server_address[1]}"
    assert json.loads(request.body) == {
        "job_id": "2bH5Yk3sQeM1pZ0x9LwVnR4tUa7",
        "user_id": 7,
        "attempt": 3,
        "message": "héllo, wörld",
        "params": {"url": target},
    }


def test_a_stale_timestamp_does_not_verify(server, handler):
    handler.handle(job(url(server, "/status/200")))

    [request] = server.received
    assert not verify(secret=SECRET, headers=request.headers, body=request.body, now=NOW + 301)


# --- Outcomes ------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [200, 201, 202, 204])
def test_a_2xx_answer_is_success(server, handler, code):
    assert handler.handle(job(url(server, f"/status/{code}"))).http_status == code


@pytest.mark.parametrize("code", [500, 502, 503, 429])
def test_a_5xx_or_429_answer_is_retryable(server, handler, code):
    with pytest.raises(RetryableError) as caught:
        handler.handle(job(url(server, f"/status/{code}")))

    assert not isinstance(caught.value, HandlerTimeout)
    assert str(code) in str(caught.value)


def test_retry_after_in_seconds_is_passed_on(server, handler):
    with pytest.raises(RetryableError) as caught:
        handler.handle(job(url(server, "/status/503")))

    assert caught.value.retry_after == 7.0


@pytest.mark.parametrize("code", [400, 401, 404, 410, 422])
def test_another_4xx_answer_is_permanent(server, handler, code):
    with pytest.raises(PermanentError, match=str(code)):
        handler.handle(job(url(server, f"/status/{code}")))


def test_a_redirect_is_permanent_and_its_target_is_never_requested(server, handler):
    with pytest.raises(PermanentError, match=r"302.*redirects are not followed"):
        handler.handle(job(url(server, "/redirect")))

    assert [request.path for request in server.received] == ["/redirect"]


def test_a_refused_connection_is_retryable(handler):
    with socket.socket() as bound:  # bound but not listening: connections are refused
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]

        with pytest.raises(RetryableError, match="refused"):
            handler.handle(job(f"http://127.0.0.1:{port}/"))


# --- Time limits ---------------------------------------------------------------------------


def test_a_server_that_hangs_past_the_deadline_times_out_quickly(server, handler):
    started = time.monotonic()

    with pytest.raises(HandlerTimeout):
        handler.handle(job(url(server, "/hang"), timeout=0.3))

    assert time.monotonic() - started < TIME_LIMIT
    assert [request.path for request in server.received] == ["/hang"]


def test_the_handlers_cap_bounds_a_request_when_the_job_allows_longer(server):
    capped = HttpHandler(
        signing_secrets=secrets_of,
        allowed_hosts=["127.0.0.1:*"],
        allow_private_addresses=True,
        max_timeout=0.3,
    )
    started = time.monotonic()

    with pytest.raises(HandlerTimeout):
        capped.handle(job(url(server, "/hang"), timeout=600.0))

    assert time.monotonic() - started < TIME_LIMIT


def test_a_server_trickling_bytes_cannot_stretch_the_attempt_past_its_deadline(server, handler):
    started = time.monotonic()

    with pytest.raises(HandlerTimeout):
        handler.handle(job(url(server, "/trickle"), timeout=0.5))

    assert time.monotonic() - started < TIME_LIMIT


def test_nothing_is_sent_once_the_deadline_has_passed(server, handler):
    with pytest.raises(HandlerTimeout):
        handler.handle(job(url(server, "/status/200"), timeout=-1.0))

    assert server.received == []


# --- Where the request goes ----------------------------------------------------------------


def test_the_connection_goes_to_the_checked_address_while_host_keeps_the_name(server):
    lookups: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        lookups.append(host)
        return ["127.0.0.1"]

    pinned = HttpHandler(
        signing_secrets=secrets_of,
        allowed_hosts=["hooks.example.com:*"],
        allow_private_addresses=True,
        resolver=resolver,
    )

    pinned.handle(job(url(server, "/status/200", host="hooks.example.com")))

    [request] = server.received
    assert request.headers["Host"] == f"hooks.example.com:{server.server_address[1]}"
    assert lookups == ["hooks.example.com"]  # resolved once; the connection used that answer


def test_a_host_that_now_resolves_to_a_private_address_is_refused_without_a_request(server):
    answers = iter([["93.184.215.14"], ["127.0.0.1"]])  # a public answer, then a rebind
    handler = HttpHandler(
        signing_secrets=secrets_of,
        allowed_hosts=["hooks.example.com:*"],
        resolver=lambda host, port: next(answers),
    )
    target = url(server, "/status/200", host="hooks.example.com")
    handler.validate_params({"url": target})

    with pytest.raises(InvalidHandlerParams, match="loopback"):
        handler.handle(job(target))

    assert server.received == []


def test_a_host_removed_from_the_allow_list_since_create_fails_permanently(server):
    handler = HttpHandler(
        signing_secrets=secrets_of, allowed_hosts=[], allow_private_addresses=True
    )

    with pytest.raises(PermanentError, match="allow-list"):
        handler.handle(job(url(server, "/status/200")))

    assert server.received == []


def test_a_failing_name_lookup_at_call_time_is_retryable(server):
    def resolver(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    handler = HttpHandler(
        signing_secrets=secrets_of,
        allowed_hosts=["hooks.example.com:*"],
        allow_private_addresses=True,
        resolver=resolver,
    )

    with pytest.raises(RetryableError, match="name resolution failed"):
        handler.handle(job(url(server, "/status/200", host="hooks.example.com")))


# --- HTTPS -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[str, str]:
    """A self-signed certificate for localhost (made with the openssl command)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = str(folder / "cert.pem"), str(folder / "key.pem")
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-nodes", "-days", "1", "-subj", "/CN=localhost"),
            *("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"),
            *("-keyout", key, "-out", cert, "-addext", "subjectAltName=DNS:localhost"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture
def tls_server(certificate) -> Iterator[_Server]:
    cert, key = certificate
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = _Server()
    server.socket = context.wrap_socket(server.socket, server_side=True)
    yield from _serve(server)


@pytest.fixture
def tls_handler(certificate) -> HttpHandler:
    return HttpHandler(
        signing_secrets=secrets_of,
        allowed_hosts=["localhost:*"],
        allow_private_addresses=True,
        ca_file=certificate[0],
        resolver=lambda host, port: ["127.0.0.1"],
    )


def test_https_verifies_the_certificate_against_the_host_name(tls_server, tls_handler):
    tls_handler.handle(job(f"https://localhost:{tls_server.server_address[1]}/status/204"))

    [request] = tls_server.received
    assert request.headers["Host"] == f"localhost:{tls_server.server_address[1]}"


def test_https_to_a_server_with_an_untrusted_certificate_is_retryable(tls_server):
    handler = HttpHandler(
        signing_secrets=secrets_of,
        allowed_hosts=["localhost:*"],
        allow_private_addresses=True,
        resolver=lambda host, port: ["127.0.0.1"],
    )

    with pytest.raises(RetryableError, match="CERTIFICATE_VERIFY_FAILED"):
        handler.handle(job(f"https://localhost:{tls_server.server_address[1]}/status/200"))

    assert tls_server.received == []


def test_https_to_a_hanging_server_times_out_quickly(tls_server, tls_handler):
    target = f"https://localhost:{tls_server.server_address[1]}/hang"
    started = time.monotonic()

    with pytest.raises(HandlerTimeout):
        tls_handler.handle(job(target, timeout=0.3))

    assert time.monotonic() - started < TIME_LIMIT
