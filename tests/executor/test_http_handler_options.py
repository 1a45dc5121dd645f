"""The http handler's options against a real HTTP server: method, custom headers, and what
an answer leaves on the attempt (its status and an excerpt of its body, in the error of a
failure and in the attempt's history)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from jobsvc.handlers.base import HandlerResult, JobContext
from jobsvc.handlers.errors import InvalidHandlerParams, PermanentError, RetryableError
from jobsvc.handlers.http import MAX_BODY_EXCERPT_BYTES, HttpHandler
from jobsvc.handlers.signing import verify

SECRET = "whsec_" + "c2VjcmV0" * 4
NOW = 1_767_225_600


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
        self.answers: dict[str, tuple[int, bytes]] = {}  # path -> (status, body)


class _Responder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def _any(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.received.append(Received(self.command, self.path, dict(self.headers), body))
        status, answer = self.server.answers.get(self.path, (200, b""))
        self.send_response(status)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_POST = do_PUT = do_PATCH = _any

    def log_message(self, format, *args) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def handler() -> HttpHandler:
    return HttpHandler(
        signing_secrets=lambda user_id: [SECRET],
        allowed_hosts=["127.0.0.1:*"],
        allow_private_addresses=True,
        answer_excerpts=True,  # what a deployment without private addresses keeps
        wall_clock=lambda: NOW,
    )


def url(server: _Server, path: str = "/hook") -> str:
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


def run(handler: HttpHandler, params: dict) -> HandlerResult:
    stored = handler.validate_params(params)
    return handler.handle(
        JobContext(job_id="job1", user_id=7, shard_id=0, attempt=1, message="m", params=stored)
    )


# --- method -----------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "put"])
def test_the_job_is_sent_with_the_method_it_names(handler, server, method):
    run(handler, {"url": url(server), "method": method})

    [received] = server.received
    assert received.method == method.upper()
    assert verify(secret=SECRET, headers=received.headers, body=received.body, now=NOW)


def test_without_a_method_it_is_post_and_params_stay_as_they_were(handler, server):
    assert handler.validate_params({"url": url(server)}) == {"url": url(server)}


@pytest.mark.parametrize("method", ["GET", "DELETE", "", 1, None, "POST "])
def test_another_method_is_refused(handler, server, method):
    with pytest.raises(InvalidHandlerParams, match="method"):
        handler.validate_params({"url": url(server), "method": method})


# --- headers ----------------------------------------------------------------------------


def test_custom_headers_are_sent(handler, server):
    headers = {"Authorization": "Bearer abc", "X-Tenant": "blue"}

    run(handler, {"url": url(server), "headers": headers})

    [received] = server.received
    assert received.headers["Authorization"] == "Bearer abc"
    assert received.headers["X-Tenant"] == "blue"


def test_header_values_stay_out_of_the_delivered_body(handler, server):
    run(handler, {"url": url(server), "headers": {"Authorization": "Bearer abc"}})

    [received] = server.received
    assert b"Bearer abc" not in received.body
    assert json.loads(received.body)["params"]["headers"] == {"Authorization": "***"}


def test_stored_headers_are_what_was_given(handler, server):
    params = {"url": url(server), "method": "PATCH", "headers": {"X-A": "1"}}

    assert handler.validate_params(params) == params


@pytest.mark.parametrize(
    "name",
    [
        "Host",
        "content-length",
        "Content-Type",
        "Transfer-Encoding",
        "Connection",
        "Keep-Alive",
        "Upgrade",
        "TE",
        "Trailer",
        "Proxy-Authorization",
        "Expect",
        "Idempotency-Key",
        "X-Jobsvc-Signature",
        "x-jobsvc-timestamp",
        "X-Jobsvc-Anything",
        "webhook-id",
        "Webhook-Signature",
        "webhook-timestamp",
        "User-Agent",
    ],
)
def test_a_header_the_handler_or_http_owns_is_refused(handler, server, name):
    with pytest.raises(InvalidHandlerParams, match="headers"):
        handler.validate_params({"url": url(server), "headers": {name: "x"}})


@pytest.mark.parametrize(
    "headers",
    [
        {"Bad Name": "x"},
        {"X-A": "line\r\nX-Injected: 1"},
        {"X-A": "\x00"},
        {"X-A": 5},
        {"": "x"},
        {"X-A": "é"},
        {"X-A": "v" * 2049},
        {f"X-{n}": "v" for n in range(21)},
        ["X-A", "v"],
        "X-A: v",
    ],
    ids=[
        "space-in-name",
        "crlf",
        "nul",
        "not-a-string",
        "empty-name",
        "non-ascii",
        "too-long",
        "too-many",
        "list",
        "string",
    ],
)
def test_an_unusable_header_is_refused(handler, server, headers):
    with pytest.raises(InvalidHandlerParams, match="headers"):
        handler.validate_params({"url": url(server), "headers": headers})


def test_an_unknown_parameter_is_still_refused(handler, server):
    with pytest.raises(InvalidHandlerParams, match="Unknown parameter"):
        handler.validate_params({"url": url(server), "verb": "PUT"})


# --- what a failure records -------------------------------------------------------------


def test_a_failed_answer_records_its_status_and_body(handler, server):
    server.answers["/hook"] = (422, b'{"error": "customer 17 does not exist"}')

    with pytest.raises(PermanentError) as failed:
        run(handler, {"url": url(server)})

    message = str(failed.value)
    assert "422" in message
    assert "customer 17 does not exist" in message


def test_where_private_addresses_are_allowed_an_answers_body_is_not_recorded(server):
    internal = HttpHandler(
        signing_secrets=lambda user_id: [SECRET],
        allowed_hosts=["127.0.0.1:*"],
        allow_private_addresses=True,
    )
    server.answers["/hook"] = (403, b"internal admin console: secret stuff")

    with pytest.raises(PermanentError) as failed:
        run(internal, {"url": url(server)})

    assert "403" in str(failed.value)
    assert "secret stuff" not in str(failed.value)


def test_a_retryable_answer_records_its_body_too(handler, server):
    server.answers["/hook"] = (503, b"maintenance until 10:00")

    with pytest.raises(RetryableError, match="maintenance until 10:00"):
        run(handler, {"url": url(server)})


def test_only_a_bounded_excerpt_of_a_long_body_is_kept(handler, server):
    server.answers["/hook"] = (500, b"A" * 100_000)

    with pytest.raises(RetryableError) as failed:
        run(handler, {"url": url(server)})

    message = str(failed.value)
    assert message.count("A") <= MAX_BODY_EXCERPT_BYTES
    assert "…" in message


def test_control_characters_of_a_body_are_not_recorded(handler, server):
    server.answers["/hook"] = (400, b"bad\r\n\x00\x1b[31mred\xff")

    with pytest.raises(PermanentError) as failed:
        run(handler, {"url": url(server)})

    message = str(failed.value)
    assert "\x00" not in message and "\x1b" not in message and "\r" not in message
    assert "bad" in message and "red" in message


# --- what the attempt's history keeps ---------------------------------------------------


def test_a_success_reports_its_status_and_the_start_of_its_body(handler, server):
    server.answers["/hook"] = (201, b'{"id": "order-9"}\n')

    assert run(handler, {"url": url(server)}) == HandlerResult(201, '{"id": "order-9"}\n')


def test_a_failure_carries_its_status_and_body_for_the_history(handler, server):
    server.answers["/hook"] = (503, b"maintenance until 10:00")

    with pytest.raises(RetryableError) as failed:
        run(handler, {"url": url(server)})

    assert failed.value.result == HandlerResult(503, "maintenance until 10:00")


def test_an_empty_body_is_no_excerpt(handler, server):
    server.answers["/hook"] = (204, b"")

    assert run(handler, {"url": url(server)}) == HandlerResult(204, None)


def test_the_excerpt_is_bounded_by_its_option_and_cut_on_a_character(server):
    handler = HttpHandler(
        signing_secrets=lambda user_id: [SECRET],
        allowed_hosts=["127.0.0.1:*"],
        allow_private_addresses=True,
        answer_excerpts=True,
        response_excerpt_bytes=5,
    )
    server.answers["/hook"] = (200, "abcdé and much more".encode())  # é: bytes 5 and 6

    assert run(handler, {"url": url(server)}).response_excerpt == "abcd"
    server.answers["/hook"] = (400, b"A" * 2000)
    with pytest.raises(PermanentError) as failed:
        run(handler, {"url": url(server)})
    assert failed.value.result == HandlerResult(400, "AAAAA")
    assert str(failed.value).count("A") == MAX_BODY_EXCERPT_BYTES  # the error's own bound


def test_the_excerpt_keeps_lines_and_drops_other_control_characters(handler, server):
    server.answers["/hook"] = (200, b"line 1\r\nline\t2\x00\x1b[31m\xff")

    excerpt = run(handler, {"url": url(server)}).response_excerpt

    assert excerpt == "line 1\nline\t2[31m\ufffd"


def test_no_excerpt_is_kept_when_its_option_is_zero(server):
    handler = HttpHandler(
        signing_secrets=lambda user_id: [SECRET],
        allowed_hosts=["127.0.0.1:*"],
        allow_private_addresses=True,
        answer_excerpts=True,
        response_excerpt_bytes=0,
    )
    server.answers["/hook"] = (200, b"fine")

    assert run(handler, {"url": url(server)}) == HandlerResult(200, None)
