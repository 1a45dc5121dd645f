"""The API as `make run` serves it: gunicorn with the production WSGI config, over HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connections

from tests.served_api import serving_api
from tests.waiting import wait_until


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


def _api_backends(alias: str) -> set[int]:
    """PostgreSQL backends connected to this alias's database, other than the test's own."""
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        return {pid for (pid,) in cursor.fetchall()}


def _terminate(alias: str, pids: set[int]) -> int:
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM unnest(%s::int[]) pid",
            [sorted(pids)],
        )
        return cursor.fetchone()[0]


@pytest.mark.django_db(databases="__all__", transaction=True)
def test_the_api_reconnects_when_postgresql_ends_its_kept_connections():
    """Kept connections the server has ended are dropped before use, not failed on.

    One sync worker, so the requests after the restart-like event are served by
    the same thread whose kept connections were ended. Each request must succeed, on new
    backends.
    """
    with serving_api(workers=1, threads=1) as base:
        password = "a long enough passphrase 42"
        status, body = _call(
            "POST", f"{base}/api/v1/users", {"username": "kept-conn", "password": password}
        )
        assert status == 201, body
        status, body = _call(
            "POST", f"{base}/api/v1/auth/login", {"username": "kept-conn", "password": password}
        )
        token = body["data"]["token"]
        execute_at = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
        job = {"message": "survives", "execute_at": execute_at}
        status, body = _call("GET", f"{base}/api/v1/me/jobs", token=token)  # every shard
        assert status == 200, body
        aliases = list(connections)
        kept = {alias: _api_backends(alias) for alias in aliases}
        assert all(kept.values()), f"the API keeps no connection to some database: {kept}"
        assert sum(_terminate(alias, kept[alias]) for alias in aliases) >= len(aliases)
        wait_until(
            lambda: all(not _api_backends(alias) & kept[alias] for alias in aliases),
            timeout=10,
            what="the ended backends have exited",
        )

        created = []
        for _ in range(len(aliases)):
            status, body = _call("POST", f"{base}/api/v1/me/jobs", job, token)
            assert status == 201, body
            created.append(body["data"]["id"])
        status, body = _call("GET", f"{base}/api/v1/me/jobs", token=token)
        assert status == 200, body
        assert {item["id"] for item in body["data"]} >= set(created)
        status, body = _call(
            "POST", f"{base}/api/v1/auth/login", {"username": "kept-conn", "password": password}
        )
        assert status == 200, body
        for alias in aliases:
            now_kept = _api_backends(alias)
            assert now_kept, f"{alias}: the API did not reconnect"
            assert not now_kept & kept[alias], f"{alias}: an ended backend is still listed"
