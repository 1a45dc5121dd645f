"""The API as `make run` serves it: gunicorn with the production WSGI config, over HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "-c",
            str(REPO / "deploy" / "gunicorn.conf.py"),
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "jobsvc.wsgi:application",
        ],
        cwd=REPO,
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=1):
                break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"gunicorn did not serve /healthz: {process.stderr.read().decode()}")
            time.sleep(0.1)  # polling a starting server, bounded by the deadline above
    yield base
    process.terminate()
    process.wait(timeout=30)


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
