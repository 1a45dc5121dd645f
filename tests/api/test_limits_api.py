"""Per-user limits on scheduling jobs: 429 with Retry-After and the RateLimit fields, naming
the limit that was hit; creates, retries and reschedules count alike."""

from __future__ import annotations

import pytest

from jobsvc.accounts.authentication import user_cache
from jobsvc.handlers.setup import validation_registry
from jobsvc.jobs.limits import create_limiter
from jobsvc.jobs.models import Job
from jobsvc.sharding.ids import shard_of
from jobsvc.sharding.shards import shard_alias
from tests.api.support import (
    RETRY_MANY_URL,
    create_job,
    error_of,
    insert_job,
    job_body,
    job_count,
    post_jobs,
    reschedule_url,
    retry_url,
    set_status,
    stored_job,
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


def items(header: str) -> list[str]:
    return [item.strip() for item in header.split(",")]


def test_a_429_carries_the_ratelimit_fields_of_every_applying_limit(client_for, user):
    client = client_for(limited(user, max_unfinished_jobs=1, create_rate_per_second=2.0))
    create_job(client)

    response = post_jobs(client, job_body())

    error_of(response, 429, "unfinished_jobs_limited")
    policies = items(response["RateLimit-Policy"])
    assert policies[0].startswith('"create-rate";q=')
    assert policies[1] == '"unfinished-jobs";q=1'
    assert policies[2].startswith('"stored-bytes";q=')
    assert ';qu="content-bytes"' in policies[2]
    assert items(response["RateLimit"])[1] == '"unfinished-jobs";r=0'


# --- stored bytes ---------------------------------------------------------------------------


def test_a_create_past_the_stored_bytes_limit_is_a_429_naming_it(client_for, user):
    client = client_for(limited(user, max_stored_bytes=100))
    create_job(client, job_body("x" * 60))

    response = post_jobs(client, job_body("y" * 60))

    error = error_of(response, 429, "stored_bytes_limited")
    assert "at most 100" in error["message"]
    assert int(response["Retry-After"]) >= 1
    assert '"stored-bytes";r=' in response["RateLimit"]
    assert job_count(user.pk) == 1


def test_bytes_are_counted_in_utf_8_with_the_handler_parameters(client_for, user, settings):
    settings.HTTP_HANDLER_ALLOWED_HOSTS = ["hooks.example.com"]
    settings.HTTP_HANDLER_ALLOW_PRIVATE_ADDRESSES = True  # nothing resolved at create
    validation_registry.cache_clear()
    try:
        client = client_for(limited(user, max_stored_bytes=100))
        body = job_body("\u00e9" * 30) | {"handler": "http"}  # 60 bytes of message
        body["handler_params"] = {"url": "https://hooks.example.com/" + "p" * 40}  # 75 of JSON

        error_of(post_jobs(client, body), 429, "stored_bytes_limited")
        body["handler_params"] = {"url": "https://hooks.example.com/"}  # 35 of JSON
        create_job(client, body)
    finally:
        validation_registry.cache_clear()  # `settings` is restored next; rebuild from that


def test_finished_jobs_bytes_do_not_count(client_for, user):
    client = client_for(limited(user, max_stored_bytes=100))
    first = create_job(client, job_body("x" * 60))
    set_status(first["id"], "succeeded")

    create_job(client, job_body("y" * 60))


# --- retries and reschedules count ------------------------------------------------------


def failed(job_id: str) -> None:
    set_status(job_id, "failed")


def test_a_retry_past_the_unfinished_cap_is_a_429(client_for, user):
    client = client_for(limited(user, max_unfinished_jobs=1))
    first = create_job(client)
    failed(first["id"])
    create_job(client)

    response = client.post(retry_url(first["id"]), {}, format="json")

    error_of(response, 429, "unfinished_jobs_limited")
    assert stored_job(first["id"]).status == "failed"


def test_a_bulk_retry_past_the_unfinished_cap_retries_nothing(client_for, user):
    client = client_for(limited(user, max_unfinished_jobs=3))
    jobs = [create_job(client) for _ in range(3)]
    for job in jobs:
        failed(job["id"])
    create_job(client)

    response = client.post(RETRY_MANY_URL, {"status": ["failed"]}, format="json")

    error_of(response, 429, "unfinished_jobs_limited")
    assert [stored_job(job["id"]).status for job in jobs] == ["failed"] * 3


def test_a_bulk_retry_within_the_limits_takes_its_jobs_from_them(client_for, user):
    client = client_for(limited(user, max_unfinished_jobs=3))
    jobs = [create_job(client) for _ in range(2)]
    for job in jobs:
        failed(job["id"])

    retried = client.post(RETRY_MANY_URL, {"status": ["failed"]}, format="json")
    assert retried.json()["data"] == {"retried": 2}

    create_job(client)
    error_of(post_jobs(client, job_body()), 429, "unfinished_jobs_limited")


def test_a_retry_counts_against_the_create_rate(client_for, user, settings):
    client = client_for(limited(user, create_rate_per_second=0.01))  # a bucket of one bulk
    job = create_job(client)
    failed(job["id"])
    post_jobs(client, [job_body() for _ in range(settings.MAX_BULK_JOBS - 1)])

    error_of(client.post(retry_url(job["id"]), {}, format="json"), 429, "create_rate_limited")


def test_a_bulk_retry_larger_than_the_rate_burst_is_a_400(client_for, user, monkeypatch):
    monkeypatch.setattr(create_limiter, "_burst_seconds", 1.0)
    monkeypatch.setattr(create_limiter, "_min_burst", 2)
    client = client_for(limited(user, create_rate_per_second=2.0))  # a burst of 2 jobs
    for n in range(3):
        failed(insert_job(user_id=user.pk, shard_id=n % 2).id)

    response = client.post(RETRY_MANY_URL, {"status": ["failed"]}, format="json")

    error = error_of(response, 400, "invalid")
    assert "at most 2 can be scheduled at once" in error["message"]


def test_a_reschedule_to_a_longer_message_past_the_byte_limit_is_a_429(client_for, user):
    client = client_for(limited(user, max_stored_bytes=100))
    job = create_job(client, job_body("x" * 50))

    response = client.post(reschedule_url(job["id"]), {"message": "y" * 101}, format="json")

    error_of(response, 429, "stored_bytes_limited")
    assert stored_job(job["id"]).message == "x" * 50


def test_a_reschedule_counts_against_the_create_rate(client_for, user, settings):
    client = client_for(limited(user, create_rate_per_second=0.01))
    job = create_job(client)
    post_jobs(client, [job_body() for _ in range(settings.MAX_BULK_JOBS - 1)])

    response = client.post(reschedule_url(job["id"]), {"message": "new"}, format="json")

    error_of(response, 429, "create_rate_limited")


def test_the_staff_redrive_is_not_limited(staff_client, user):
    limited(user, max_unfinished_jobs=1)
    job_ids = [insert_job(user_id=user.pk, shard_id=0).id for _ in range(3)]
    for job_id in job_ids:
        Job.objects.using(shard_alias(shard_of(job_id))).filter(pk=job_id).update(status="failed")

    response = staff_client.post(
        "/api/v1/jobs/redrive", {"user_id": user.pk, "status": ["failed"]}, format="json"
    )

    assert response.json()["data"] == {"retried": 3}
