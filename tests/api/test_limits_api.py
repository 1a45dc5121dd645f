"""Per-user limits on creating jobs: 429 with Retry-After, naming the limit that was hit."""

from __future__ import annotations

import pytest

from jobsvc.accounts.authentication import user_cache
from jobsvc.jobs.limits import create_limiter
from tests.api.support import (
    create_job,
    error_of,
    insert_job,
    job_body,
    job_count,
    post_jobs,
    set_status,
)

pytestmark = pytest.mark.django_db(databases="__all__")


@pytest.fixture(autouse=True)
def _fresh_limits(monkeypatch):
    """Each test starts with no remembered buckets or counts, and counts on every create."""
    create_limiter.forget()
    user_cache.clear()
    monkeypatch.setattr(create_limiter, "_refresh_seconds", 0.0)
    monkeypatch.setattr("jobsvc.jobs.limits.COUNT_REUSE_FACTOR", 0)
    yield
    create_limiter.forget()


def limited(user, **fields):
    for name, value in fields.items():
        setattr(user, name, value)
    user.save()
    return user


def test_a_create_past_the_unfinished_cap_is_a_429_naming_it(client_for, user):
    client = client_for(limited(user, max_unfinished_jobs=3))
    for _ in range(3):
        create_job(client)

    response = post_jobs(client, job_body())

    error = error_of(response, 429, "unfinished_jobs_limited")
    assert "Unfinished-jobs limit" in error["message"]
    assert "at most 3" in error["message"]
    assert int(response["Retry-After"]) >= 1
    assert job_count(user.pk) == 3


def test_a_bulk_that_would_pass_the_cap_creates_nothing(client_for, user):
    client = client_for(limited(user, max_unfinished_jobs=5))
    create_job(client)

    response = post_jobs(client, [job_body() for _ in range(5)])

    error_of(response, 429, "unfinished_jobs_limited")
    assert job_count(user.pk) == 1


def test_finished_and_cancelled_jobs_do_not_count(client_for, user):
    client = client_for(limited(user, max_unfinished_jobs=2))
    for status in ("succeeded", "failed", "cancelled"):
        insert_job(user_id=user.pk, shard_id=0, status=status)
    first = create_job(client)
    create_job(client)
    error_of(post_jobs(client, job_body()), 429)

    set_status(first["id"], "succeeded")

    create_job(client)


def test_queued_and_running_jobs_count(client_for, user):
    client = client_for(limited(user, max_unfinished_jobs=2))
    insert_job(user_id=user.pk, shard_id=1, status="queued")
    insert_job(user_id=user.pk, shard_id=2, status="running")

    error_of(post_jobs(client, job_body()), 429, "unfinished_jobs_limited")


def test_a_create_past_the_rate_is_a_429_with_retry_after(client_for, user, settings):
    client = client_for(limited(user, create_rate_per_second=0.01))  # a bucket of one bulk
    post_jobs(client, [job_body() for _ in range(settings.MAX_BULK_JOBS)])

    response = post_jobs(client, job_body())

    error = error_of(response, 429, "create_rate_limited")
    assert "Create-rate limit" in error["message"]
    assert int(response["Retry-After"]) >= 1
    assert job_count(user.pk) == settings.MAX_BULK_JOBS


def test_zero_turns_a_users_limits_off(client_for, user, settings):
    settings.USER_MAX_UNFINISHED_JOBS = 1
    client = client_for(limited(user, max_unfinished_jobs=0))

    create_job(client)
    create_job(client)


def test_the_deployment_default_applies_without_an_override(client_for, user, settings):
    settings.USER_MAX_UNFINISHED_JOBS = 1
    client = client_for(user)
    create_job(client)

    error_of(post_jobs(client, job_body()), 429, "unfinished_jobs_limited")


def test_one_users_limit_does_not_refuse_another(client_for, user, other_user):
    client_for_user = client_for(limited(user, max_unfinished_jobs=1))
    create_job(client_for_user)
    error_of(post_jobs(client_for_user, job_body()), 429)

    create_job(client_for(other_user))


def test_the_schema_documents_the_429_of_create():
    from rest_framework.test import APIClient

    schema = APIClient().get("/api/v1/schema/?format=json").json()

    assert "429" in schema["paths"]["/api/v1/me/jobs"]["post"]["responses"]


def test_an_operator_sets_a_users_limits_in_the_admin(make_user, user):
    from django.test import Client

    superuser = make_user(is_staff=True)
    superuser.is_superuser = True
    superuser.save()
    admin = Client()
    admin.force_login(superuser)

    listing = admin.get("/admin/accounts/user/").content.decode()
    page = admin.get(f"/admin/accounts/user/{user.pk}/change/").content.decode()

    assert "column-max_unfinished_jobs" in listing
    assert "column-create_rate_per_second" in listing
    assert 'name="max_unfinished_jobs"' in page
    assert 'name="create_rate_per_second"' in page
