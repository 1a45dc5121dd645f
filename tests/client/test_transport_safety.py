"""The client never leaks its credentials: no redirect is followed (urllib would resend the
Authorization header to the new host), plain HTTP goes only to this machine, and the saved
session's temporary file cannot be planted."""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest

from jobsvc_client.errors import TransportError
from jobsvc_client.models import Token
from jobsvc_client.token_file import Session, session_save
from jobsvc_client.transport import UrllibTransport, secure_enough


@contextmanager
def http_server(answer) -> Iterator[tuple[str, list]]:
    """A local server answering every request with ``answer(handler)``; yields its URL and
    the requests it received (method, path, Authorization)."""
    seen: list = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _any(self):
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            seen.append((self.command, self.path, self.headers.get("Authorization")))
            answer(self)

        do_GET = do_POST = _any

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def respond(status: int, headers: dict[str, str] | None = None):
    def answer(handler):
        handler.send_response(status)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", "2")
        handler.end_headers()
        handler.wfile.write(b"{}")

    return answer


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_redirect_is_returned_never_followed(status, method):
    with (
        http_server(respond(200)) as (elsewhere, reached),
        http_server(
            lambda handler: respond(status, {"Location": f"{elsewhere}/stolen"})(handler)
        ) as (api, _),
    ):
        response = UrllibTransport().send(
            method,
            f"{api}/api/v1/me/jobs",
            headers={"Authorization": "Bearer secret-token"},
            body=b"{}" if method == "POST" else None,
            timeout=5,
        )

    assert response.status == status
    assert reached == []


@pytest.mark.parametrize(
    ("url", "secure"),
    [
        ("https://jobs.example.com/api/v1", True),
        ("http://127.0.0.1:8000/api/v1", True),
        ("http://127.8.9.10/api/v1", True),
        ("http://[::1]:8000/api/v1", True),
        ("http://localhost:8000/api/v1", True),
        ("http://jobs.example.com/api/v1", False),
        ("http://10.0.0.5:8000/api/v1", False),
        ("http://localhost.example.com/api/v1", False),
        ("ftp://127.0.0.1/api/v1", False),
    ],
)
def test_plain_http_is_secure_enough_only_to_this_machine(url, secure):
    assert secure_enough(url) is secure


def test_plain_http_to_another_host_is_refused_before_anything_is_sent():
    with pytest.raises(TransportError, match="plain HTTP"):
        UrllibTransport().send(
            "POST",
            "http://192.0.2.1:9/api/v1/auth/login",
            headers={},
            body=b'{"password": "x"}',
            timeout=0.1,
        )


def test_plain_http_to_another_host_can_be_allowed_explicitly(monkeypatch):
    monkeypatch.setenv("JOBSVC_CLIENT_ALLOW_HTTP", "1")

    with pytest.raises(TransportError) as failed:  # sent, and nobody answers there
        UrllibTransport().send("GET", "http://192.0.2.1:9/x", headers={}, body=None, timeout=0.1)

    assert "plain HTTP" not in str(failed.value)


def test_the_session_file_is_never_written_through_a_planted_link(tmp_path):
    target = tmp_path / "victim"
    target.write_text("untouched")
    path = tmp_path / "token.json"
    # The name the temporary file used to have, pointing at a file of the attacker's choice.
    os.symlink(target, tmp_path / f".token.json.{os.getpid()}.tmp")
    token = Token("secret-token", datetime.now(UTC) + timedelta(hours=1))

    session_save(path, Session("https://jobs.example.com", token))

    assert target.read_text() == "untouched"
    assert "secret-token" in path.read_text()
    assert not path.is_symlink()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
