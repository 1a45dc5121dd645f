"""Retries, backoff and token refresh, driven through an in-memory transport and clock."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from jobsvc_client import Client, JobSpec, Token, TransportError, Unavailable
from jobsvc_client.transport import Response

NOW = datetime(2030, 1, 1, tzinfo=UTC)
JOB = {
    "id": "2ZZZZZZZZZZZZZZZZZZZZZZZZZZ",
    "user_id": 1,
    "message": "m",
    "status": "scheduled",
    "execute_at": "2030-01-01T00:05:00Z",
    "shard_id": 0,
    "handler": "default",
    "handler_params": {},
    "attempts": 0,
    "max_attempts": 3,
    "timeout_seconds": 30,
    "due_at": "2030-01-01T00:05:00Z",
    "last_error": None,
    "attempt_errors": [],
    "created_at": "2030-01-01T00:00:00Z",
    "updated_at": "2030-01-01T00:00:00Z",
    "dispatched_at": None,
    "started_at": None,
    "finished_at": None,
}


def answer(status: int, data=None, **headers: str) -> Response:
    body = {"data": data, "success": True} if status < 400 else {"error": {"code": "x"}}
    return Response(
        status, {k.replace("_", "-"): v for k, v in headers.items()}, json.dumps(body).encode()
    )


class ScriptedTransport:
    """Answers each request with the next scripted response (an exception is raised)."""

    def __init__(self, *script) -> None:
        self.script = list(script)
        self.requests: list[tuple[str, str, dict[str, str]]] = []

    def send(self, method, url, *, headers, body, timeout):
        self.requests.append((method, url, dict(headers)))
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


def client_with(transport, sleeps: list[float], expire: datetime = NOW + timedelta(hours=1)):
    return Client(
        "http://api",
        token=Token("t0", expire),
        transport=transport,
        clock=lambda: NOW,
        sleep=sleeps.append,
    )


def test_a_429_is_retried_after_the_seconds_retry_after_names():
    transport = ScriptedTransport(answer(429, retry_after="3"), answer(201, JOB))
    sleeps: list[float] = []

    job = client_with(transport, sleeps).create_job(message="m", execute_at=NOW)

    assert job.id == JOB["id"]
    assert sleeps == [3.0]


def test_a_503_without_retry_after_backs_off_exponentially_then_gives_up():
    transport = ScriptedTransport(*[answer(503)] * 6)
    sleeps: list[float] = []

    with pytest.raises(Unavailable) as raised:
        client_with(transport, sleeps).get_job(JOB["id"])

    assert raised.value.status == 503
    assert sleeps == [0.5, 1.0, 2.0, 4.0, 8.0]


def test_a_retried_create_sends_the_same_idempotency_key():
    transport = ScriptedTransport(TransportError("reset"), answer(503), answer(201, JOB))

    client_with(transport, []).create_job(message="m", execute_at=NOW)

    keys = {headers["Idempotency-Key"] for _, _, headers in transport.requests}
    assert len(transport.requests) == 3
    assert len(keys) == 1


def test_a_sign_up_is_not_resent_after_a_lost_connection():
    transport = ScriptedTransport(TransportError("reset"), answer(201, {}))

    with pytest.raises(TransportError):
        client_with(transport, []).sign_up(username="u", password="p")
    assert len(transport.requests) == 1


def test_a_token_expiring_within_a_minute_is_refreshed_first():
    refreshed = {"token": "t1", "expire": "2030-01-01T01:00:30Z"}
    transport = ScriptedTransport(answer(200, refreshed), answer(200, JOB))
    client = client_with(transport, [], expire=NOW + timedelta(seconds=59))

    client.get_job(JOB["id"])

    (_, refresh_url, refresh_headers), (_, _, get_headers) = transport.requests
    assert refresh_url == "http://api/api/v1/auth/refresh"
    assert refresh_headers["Authorization"] == "Bearer t0"
    assert get_headers["Authorization"] == "Bearer t1"
    assert client.token == Token("t1", datetime(2030, 1, 1, 1, 0, 30, tzinfo=UTC))


def test_a_token_with_time_left_is_used_as_it_is():
    transport = ScriptedTransport(answer(200, JOB))

    client_with(transport, [], expire=NOW + timedelta(seconds=61)).get_job(JOB["id"])

    assert [url for _, url, _ in transport.requests] == [f"http://api/api/v1/me/jobs/{JOB['id']}"]


def test_fields_a_newer_server_adds_are_kept():
    transport = ScriptedTransport(answer(200, {**JOB, "priority": 8, "color": "blue"}))

    job = client_with(transport, []).get_job(JOB["id"])

    assert (job.priority, job.extra) == (8, {"color": "blue"})
    assert job.to_json()["color"] == "blue"


def test_a_job_from_a_server_without_priorities_has_the_default_one():
    assert client_with(ScriptedTransport(answer(200, JOB)), []).get_job(JOB["id"]).priority == 5


def test_logging_out_sends_the_token_as_it_is_and_forgets_it():
    transport = ScriptedTransport(Response(204, {}, b""))
    client = client_with(transport, [], expire=NOW + timedelta(seconds=5))  # about to expire

    client.logout()

    [(method, url, headers)] = transport.requests  # no refresh first
    assert (method, url, headers["Authorization"]) == (
        "POST",
        "http://api/api/v1/auth/logout",
        "Bearer t0",
    )
    assert client.token is None


def test_a_password_change_is_not_resent_after_a_lost_connection():
    transport = ScriptedTransport(TransportError("reset"), Response(204, {}, b""))

    with pytest.raises(TransportError):
        client_with(transport, []).change_password(current_password="a", new_password="b")
    assert len(transport.requests) == 1


def test_a_job_spec_is_due_at_a_time_or_after_a_delay_never_both():
    assert "execute_at" not in JobSpec("m", delay_seconds=5).to_json()
    with pytest.raises(ValueError):
        JobSpec("m", NOW, delay_seconds=5).to_json()
    with pytest.raises(ValueError):
        JobSpec("m").to_json()
