"""GET /api/v1/me: who the caller is, their weight, their limits and how much they use."""

from __future__ import annotations

import pytest

from jobsvc.accounts.authentication import user_cache
from jobsvc.jobs.limits import create_limiter
from tests.api.support import create_job, error_of, insert_job

pytestmark = pytest.mark.django_db(databases="__all__")

ME_URL = "/api/v1/me"


@pytest.fixture(autouse=True)
def _fresh_limits(monkeypatch):
    """Each test counts afresh: no count remembered from an earlier request."""
    create_limiter.forget()
    user_cache.clear()
    monkeypatch.setattr(create_limiter, "_refresh_seconds", 0.0)
    monkeypatch.setattr("jobsvc.jobs.limits.COUNT_REUSE_FACTOR", 0)
    yield
    create_limiter.forget()


def me(client) -> dict:
    response = client.get(ME_URL)
    assert response.status_code == 200, response.content
    return response.json()["data"]


def test_the_caller_sees_their_account_and_the_deployments_limits(client_for, make_user, settings):
    user = make_user(job_weight=2.5)

    data = me(client_for(user))

    assert data["id"] == user.pk
    assert data["username"] == user.username
    assert data["job_weight"] == 2.5
    assert data["is_staff"] is False
    assert data["limits"] == {
        "max_unfinished_jobs": settings.USER_MAX_UNFINISHED_JOBS,
        "create_rate_per_second": settings.USER_CREATE_RATE_PER_SECOND,
        "create_burst_jobs": int(
            settings.USER_CREATE_RATE_PER_SECOND * settings.USER_CREATE_BURST_SECONDS
        ),
        "max_stored_bytes": settings.USER_MAX_STORED_BYTES,
    }
    assert data["usage"] == {
        "unfinished_jobs": 0,
        "unfinished_jobs_exact": True,
        "stored_bytes": 0,
    }


def test_usage_counts_unfinished_jobs_on_every_shard(client_for, user):
    client = client_for(user)
    create_job(client)
    for shard_id, status in [(1, "queued"), (2, "running"), (3, "succeeded"), (0, "cancelled")]:
        insert_job(user_id=user.pk, shard_id=shard_id, status=status)

    usage = me(client)["usage"]
    assert (usage["unfinished_jobs"], usage["unfinished_jobs_exact"]) == (3, True)
    assert usage["stored_bytes"] > 0


def test_a_users_own_limits_replace_the_defaults_and_zero_means_none(client_for, user):
    user.max_unfinished_jobs = 2
    user.create_rate_per_second = 0
    user.max_stored_bytes = 0
    user.save()
    client = client_for(user)
    for _ in range(3):
        insert_job(user_id=user.pk, shard_id=0)

    data = me(client)

    assert data["limits"] == {
        "max_unfinished_jobs": 2,
        "create_rate_per_second": None,
        "create_burst_jobs": None,
        "max_stored_bytes": None,
    }
    # Counting stops past the limit: 3 is "more than 2", not an exact count. Bytes are
    # not limited, so not counted.
    assert data["usage"] == {
        "unfinished_jobs": 3,
        "unfinished_jobs_exact": False,
        "stored_bytes": None,
    }


def test_a_caller_sees_only_themself(client_for, user, other_user):
    insert_job(user_id=other_user.pk, shard_id=0)

    data = me(client_for(user))

    assert data["id"] == user.pk
    assert data["usage"]["unfinished_jobs"] == 0


def test_me_needs_a_token(api_client):
    error_of(api_client.get(ME_URL), 401)


def test_me_is_in_the_schema(api_client):
    schema = api_client.get("/api/v1/schema/?format=json").json()

    operation = schema["paths"][ME_URL]["get"]
    assert operation["operationId"] == "me_get"
    assert {"200", "401"} <= set(operation["responses"])
