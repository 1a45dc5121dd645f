"""Weights cycled over the run's users, and logging in when the API throttles logins."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from rest_framework_simplejwt.tokens import SlidingToken

from jobsvc.accounts.models import User
from tools.loadgen.errors import LoadgenError, LoginFailed
from tools.loadgen.users import user_log_in, weights_for


def test_weights_are_cycled_over_the_users():
    assert weights_for(users=5, weights=[1.0, 2.0]) == [1.0, 2.0, 1.0, 2.0, 1.0]


@pytest.mark.parametrize("weights", [[], [0.0], [-1.0], [1e9]])
def test_weights_must_be_given_and_within_the_service_limits(weights):
    with pytest.raises(LoadgenError):
        weights_for(users=2, weights=weights)


def login_api(status: int, body: dict) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_a_login_the_api_answers_gives_its_token():
    server = login_api(200, {"success": True, "data": {"token": "from-the-api"}})
    try:
        user, throttled = user_log_in(url(server), User(pk=7, username="u", job_weight=2.0), "pw")
    finally:
        server.shutdown()
    assert (user.token, user.weight, throttled) == ("from-the-api", 2.0, False)


def test_a_throttled_login_gets_the_same_kind_of_token_in_process():
    server = login_api(429, {"success": False})
    try:
        user, throttled = user_log_in(url(server), User(pk=7, username="u", job_weight=1.0), "pw")
    finally:
        server.shutdown()
    assert throttled
    assert SlidingToken(user.token)["user_id"] == "7"


def test_a_refused_login_stops_the_run():
    server = login_api(401, {"success": False})
    try:
        with pytest.raises(LoginFailed, match="401"):
            user_log_in(url(server), User(pk=7, username="u", job_weight=1.0), "pw")
    finally:
        server.shutdown()
