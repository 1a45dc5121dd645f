"""The API as `make run` serves it: gunicorn with the production WSGI config, over HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest

from tests.served_api import serving_api


def _call(method: str, url: str, body=None, token: str | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


@pytest.fixture(scope="module")
def served_api():
    with serving_api() as base:
        yield base


@pytest.mark.django_db(databases="__all__", transaction=True)
def test_sign_up_log_in_schedule_and_list_over_http(served_api):
    status, body = _call(
        "POST",
        f"{served_api}/api/v1/users",
        {"username": "http-user", "password": "a long enough passphrase 42", "job_weight": 1.0},
    )
    assert status == 201, body
    status, body = _call(
        "POST",
        f"{served_api}/api/v1/auth/login",
        {"username": "http-user", "password": "a long enough passphrase 42"},
    )
    assert status == 200, body
    token = body["data"]["token"]
    execute_at = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    status, body = _call(
        "POST",
        f"{served_api}/api/v1/me/jobs",
        {"message": "Hello world", "execute_at": execute_at},
        token,
    )
    assert status == 201, body
    job = body["data"]
    status, body = _call("GET", f"{served_api}/api/v1/me/jobs", token=token)
    assert status == 200
    assert [item["id"] for item in body["data"]] == [job["id"]]
    status, body = _call("GET", f"{served_api}/readyz")
    assert status == 200
