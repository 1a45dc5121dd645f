"""What API processes share, served by gunicorn with several workers: the log-in throttle
(kept in the database, not in each process) and a token's revocation (every process
refuses it within JOBSVC_AUTH_USER_CACHE_SECONDS)."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest

from tests.conftest import DEFAULT_PASSWORD
from tests.served_api import serving_api
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

WORKERS = 3
# A rate no other test uses: buckets are keyed by their rate, so earlier tests' log-ins
# from this host do not count here.
LOGIN_RATE = "7/hour"  # no refill while the test runs, however slow the machine


def call(base: str, method: str, path: str, body=None, token: str | None = None):
    """One request on a connection of its own, so the kernel may give it to any worker."""
    parts = urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    headers = {"Content-Type": "application/json", "Connection": "close"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        connection.request(method, path, json.dumps(body) if body else None, headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_the_login_throttle_is_shared_by_every_api_process(make_user):
    user = make_user()
    body = {"username": user.username, "password": "not the password 1"}
    env = {"JOBSVC_LOGIN_THROTTLE_RATE": LOGIN_RATE}
    with serving_api(workers=WORKERS, env=env) as base:
        statuses = [call(base, "POST", "/api/v1/auth/login", body)[0] for _ in range(4 * 7)]

    # Per process, each of the workers would have let 7 through.
    assert statuses.count(401) == 7, statuses
    assert statuses.count(429) == 4 * 7 - 7, statuses


def test_a_logout_reaches_every_api_process_within_the_user_cache_time(make_user):
    user = make_user()
    env = {"JOBSVC_AUTH_USER_CACHE_SECONDS": "1"}
    with serving_api(workers=WORKERS, env=env) as base:
        status, raw = call(
            base,
            "POST",
            "/api/v1/auth/login",
            {"username": user.username, "password": DEFAULT_PASSWORD},
        )
        assert status == 200, raw
        token = json.loads(raw)["data"]["token"]
        for _ in range(4 * WORKERS):  # every worker has verified it and cached the user
            assert call(base, "GET", "/api/v1/me/jobs", token=token)[0] == 200

        assert call(base, "POST", "/api/v1/auth/logout", token=token)[0] == 204

        def refused_everywhere() -> bool:
            statuses = [call(base, "GET", "/api/v1/me/jobs", token=token)[0] for _ in range(12)]
            return set(statuses) == {401}

        wait_until(refused_everywhere, timeout=5, what="every worker refuses the token")
