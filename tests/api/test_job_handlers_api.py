"""/api/v1/me/jobs with a handler: name, parameters, attempts and timeout, checked at create.

The API validates with ``validation_registry()``, built once from the settings and cached;
tests that change the handler settings rebuild it (``handler_settings``).
"""

from __future__ import annotations

import pytest
from django.conf import settings

from jobsvc.handlers.setup import validation_registry
from jobsvc.jobs.models import Job
from jobsvc.sharding.ids import shard_of
from jobsvc.sharding.shards import shard_alias
from tests.api.support import (
    create_job,
    error_of,
    job_body,
    job_count,
    job_url,
    post_jobs,
    stored_job,
)

pytestmark = pytest.mark.django_db(databases="__all__")

RECEIVER = "http://127.0.0.1:8080/hooks/jobs"
USER_TOPIC = "user-events"


@pytest.fixture(autouse=True)
def handler_settings(settings):
    """The settings the API's handler registry is built from; rebuilt around each test.

    Loopback is allowed here, as in the end-to-end tests, unless a test turns it off.
    """
    settings.HTTP_HANDLER_ALLOWED_HOSTS = ["127.0.0.1:*", "*.example.com"]
    settings.HTTP_HANDLER_ALLOW_PRIVATE_ADDRESSES = True
    settings.KAFKA_HANDLER_ALLOWED_TOPICS = [USER_TOPIC]
    validation_registry.cache_clear()
    yield settings
    validation_registry.cache_clear()  # `settings` is restored next; rebuild from that


def _rebuild(settings, **changes) -> None:
    for name, value in changes.items():
        setattr(settings, name, value)
    validation_registry.cache_clear()


def with_handler(handler, params=None, **extra) -> dict:
    body = {**job_body(), "handler": handler, **extra}
    if params is not None:
        body["handler_params"] = params
    return body


# --- accepted ---------------------------------------------------------------------------


def test_a_job_without_a_handler_gets_the_default_handler_and_limits(user_client):
    job = create_job(user_client, job_body())

    assert job["handler"] == "default"
    assert job["handler_params"] == {}
    assert job["max_attempts"] == settings.JOB_DEFAULT_MAX_ATTEMPTS
    assert job["timeout_seconds"] == settings.JOB_DEFAULT_TIMEOUT_SECONDS
    assert (job["attempts"], job["last_error"], job["attempt_errors"]) == (0, None, [])


def test_an_http_job_is_stored_and_returned_with_its_handler_and_limits(user_client):
    body = with_handler("http", {"url": RECEIVER}, max_attempts=5, timeout_seconds=2.5)

    created = create_job(user_client, body)

    expected = {
        "handler": "http",
        "handler_params": {"url": RECEIVER},
        "max_attempts": 5,
        "timeout_seconds": 2.5,
        "attempts": 0,
        "last_error": None,
        "attempt_errors": [],
    }
    assert {key: created[key] for key in expected} == expected
    read = user_client.get(job_url(created["id"])).json()["data"]
    assert {key: read[key] for key in expected} == expected
    stored = stored_job(created["id"])
    assert (stored.handler, stored.handler_params) == ("http", {"url": RECEIVER})
    assert (stored.max_attempts, stored.timeout_seconds) == (5, 2.5)


def test_a_host_matching_a_wildcard_entry_is_accepted(user_client):
    url = "https://hooks.example.com/jobs"  # not resolved: private addresses are allowed

    job = create_job(user_client, with_handler("http", {"url": url}))

    assert job["handler_params"] == {"url": url}


@pytest.fixture
def granted(user):
    """The user may publish to USER_TOPIC (staff granted it)."""
    user.kafka_topics = [USER_TOPIC]
    user.save()
    return user


def test_a_kafka_job_to_a_topic_granted_to_its_owner_is_accepted(user_client, granted):
    job = create_job(user_client, with_handler("kafka", {"topic": USER_TOPIC}))

    assert (job["handler"], job["handler_params"]) == ("kafka", {"topic": USER_TOPIC})


def test_a_kafka_job_to_an_allowed_topic_not_granted_to_its_owner_is_refused(
    user_client, other_user
):
    other_user.kafka_topics = [USER_TOPIC]  # granted to someone else only
    other_user.save()

    response = post_jobs(user_client, with_handler("kafka", {"topic": USER_TOPIC}))

    error = error_of(response, 400)
    assert "not one of the topics this account may publish to" in str(error["fields"])
    assert "handler_params" in error["fields"]


def test_limits_at_their_bounds_are_accepted(user_client):
    job = create_job(
        user_client,
        {
            **job_body(),
            "max_attempts": settings.JOB_MAX_ATTEMPTS_LIMIT,
            "timeout_seconds": settings.JOB_TIMEOUT_LIMIT_SECONDS,
        },
    )

    assert job["max_attempts"] == settings.JOB_MAX_ATTEMPTS_LIMIT
    assert job["timeout_seconds"] == settings.JOB_TIMEOUT_LIMIT_SECONDS


def test_a_bulk_request_stores_each_jobs_handler(user_client):
    bodies = [job_body(), with_handler("http", {"url": RECEIVER}), with_handler("default")]

    response = post_jobs(user_client, bodies)

    assert response.status_code == 201, response.json()
    assert [job["handler"] for job in response.json()["data"]] == ["default", "http", "default"]


# --- refused ----------------------------------------------------------------------------


def test_an_http_url_whose_host_is_not_allowed_is_refused(user_client, user):
    response = post_jobs(user_client, with_handler("http", {"url": "http://10.1.2.3/hook"}))

    error = error_of(response, 400)
    assert set(error["fields"]) == {"handler_params"}
    assert "allow-list" in error["fields"]["handler_params"][0]
    assert job_count(user.pk) == 0


def test_no_host_is_allowed_by_default(user_client, handler_settings):
    _rebuild(handler_settings, HTTP_HANDLER_ALLOWED_HOSTS=[])

    response = post_jobs(user_client, with_handler("http", {"url": RECEIVER}))

    assert set(error_of(response, 400)["fields"]) == {"handler_params"}


def test_an_allowed_host_at_an_internal_address_is_refused_by_default(
    user_client, handler_settings
):
    _rebuild(handler_settings, HTTP_HANDLER_ALLOW_PRIVATE_ADDRESSES=False)

    response = post_jobs(user_client, with_handler("http", {"url": RECEIVER}))

    error = error_of(response, 400)
    assert set(error["fields"]) == {"handler_params"}
    assert "loopback" in error["fields"]["handler_params"][0]


@pytest.mark.parametrize(
    "params",
    [
        None,
        {},
        {"url": "ftp://127.0.0.1/x"},
        {"url": "http://user:secret@127.0.0.1/x"},
        {"url": RECEIVER, "verb": "PUT"},
        {"url": RECEIVER, "method": "GET"},
        {"url": RECEIVER, "headers": {"Host": "elsewhere"}},
        {"url": RECEIVER, "headers": {"X-A": "a\r\nX-B: b"}},
        "http://127.0.0.1/x",
        ["http://127.0.0.1/x"],
    ],
    ids=[
        "missing",
        "no-url",
        "scheme",
        "credentials",
        "extra-parameter",
        "method",
        "reserved-header",
        "header-injection",
        "string",
        "list",
    ],
)
def test_bad_http_parameters_are_refused_naming_handler_params(user_client, params):
    response = post_jobs(user_client, with_handler("http", params))

    assert set(error_of(response, 400)["fields"]) == {"handler_params"}


@pytest.mark.parametrize(
    "params",
    [{"topic": "other-topic"}, {}, {"topic": USER_TOPIC, "key": "k"}],
    ids=["not-allowed", "missing", "extra-parameter"],
)
def test_bad_kafka_parameters_are_refused_naming_handler_params(user_client, params):
    response = post_jobs(user_client, with_handler("kafka", params))

    assert set(error_of(response, 400)["fields"]) == {"handler_params"}


def test_parameters_for_the_default_handler_are_refused(user_client):
    response = post_jobs(user_client, with_handler("default", {"url": RECEIVER}))

    assert set(error_of(response, 400)["fields"]) == {"handler_params"}


@pytest.mark.parametrize("handler", ["shell", "", 7, ["http"], {"name": "http"}])
def test_an_unknown_handler_is_refused_naming_handler(user_client, handler):
    response = post_jobs(user_client, with_handler(handler))

    error = error_of(response, 400)
    assert set(error["fields"]) == {"handler"}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_attempts", 0),
        ("max_attempts", -1),
        ("max_attempts", settings.JOB_MAX_ATTEMPTS_LIMIT + 1),
        ("max_attempts", 2.5),
        ("max_attempts", "3"),
        ("max_attempts", True),
        ("timeout_seconds", 0),
        ("timeout_seconds", -5),
        ("timeout_seconds", settings.JOB_TIMEOUT_LIMIT_SECONDS + 1),
        ("timeout_seconds", "10"),
    ],
)
def test_attempts_and_timeout_out_of_bounds_are_refused(user_client, field, value):
    response = post_jobs(user_client, {**job_body(), field: value})

    assert set(error_of(response, 400)["fields"]) == {field}


def test_every_bad_field_is_reported_at_once(user_client):
    body = with_handler("nope", max_attempts=0, timeout_seconds=-1)

    response = post_jobs(user_client, body)

    assert set(error_of(response, 400)["fields"]) == {"handler", "max_attempts", "timeout_seconds"}


def test_one_bad_handler_in_a_bulk_request_refuses_the_whole_request(user_client, user):
    bodies = [job_body(), with_handler("http", {"url": "http://10.1.2.3/"}), job_body()]

    response = post_jobs(user_client, bodies)

    error = error_of(response, 400)
    assert set(error["fields"]) == {"1"}
    assert "handler_params" in error["fields"]["1"]
    assert job_count(user.pk) == 0


# --- read back --------------------------------------------------------------------------


def test_a_failed_job_shows_its_attempts_and_last_error(user_client):
    created = create_job(user_client, with_handler("http", {"url": RECEIVER}, max_attempts=2))
    errors = [
        {"attempt": 1, "error": "RetryableError: 503", "at": "2030-01-01T00:00:00Z"},
        {"attempt": 2, "error": "PermanentError: 404", "at": "2030-01-01T00:00:01Z"},
    ]
    Job.objects.using(shard_alias(shard_of(created["id"]))).filter(pk=created["id"]).update(
        status="failed", attempts=2, last_error="PermanentError: 404", attempt_errors=errors
    )

    job = user_client.get(job_url(created["id"])).json()["data"]

    assert (job["status"], job["attempts"], job["max_attempts"]) == ("failed", 2, 2)
    assert job["last_error"] == "PermanentError: 404"
    assert job["attempt_errors"] == errors


# --- idempotency ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"handler": "kafka", "handler_params": {"topic": USER_TOPIC}},
        {"handler_params": {"url": RECEIVER + "/other"}},
    ],
    ids=["handler", "handler_params"],
)
def test_a_retry_with_another_handler_is_unprocessable(user_client, granted, user, change):
    body = with_handler("http", {"url": RECEIVER})
    create_job(user_client, body, key="handler-retry")

    response = post_jobs(user_client, body | change, key="handler-retry")

    error_of(response, 422, "idempotency_key_reused")
    assert job_count(user.pk) == 1


def test_an_http_job_keeps_its_method_and_headers_but_never_shows_header_values(user_client):
    params = {"url": RECEIVER, "method": "PATCH", "headers": {"Authorization": "Bearer t"}}

    created = create_job(user_client, with_handler("http", params))
    read = user_client.get(job_url(created["id"])).json()["data"]
    listed = user_client.get("/api/v1/me/jobs").json()["data"]

    shown = {**params, "headers": {"Authorization": "***"}}
    assert created["handler_params"] == read["handler_params"] == shown
    assert [job["handler_params"] for job in listed] == [shown]
    assert stored_job(created["id"]).handler_params == params  # what the executor sends
