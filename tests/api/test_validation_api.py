"""Every bad request gets a 4xx in the error envelope, never a 500."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from jobsvc.sharding.ids import new_job_id
from jobsvc.sharding.shards import shard_count
from tests.api.support import (
    JOBS_URL,
    LOGIN_URL,
    USERS_URL,
    cancel_url,
    create_job,
    error_of,
    job_body,
    job_count,
    job_url,
    set_status,
    stored_job,
)

pytestmark = pytest.mark.django_db(databases="__all__")

BODY_URLS = [JOBS_URL, USERS_URL, LOGIN_URL]


def post_raw(client, url: str, raw: str | bytes, content_type: str = "application/json"):
    return client.post(url, raw, content_type=content_type)


# --- bodies that are not JSON, or not the JSON asked for -----------------------------------


@pytest.mark.parametrize("url", BODY_URLS)
@pytest.mark.parametrize(
    "raw",
    [
        "{",
        "not json",
        "{'message': 'single quotes'}",
        '{"message": "x",}',
        "NaN",
        '{"job_weight": Infinity}',
        b"\xff\xfe\x00",
        "[" * 100_000,
        '{"a":' * 100_000,
    ],
    ids=[
        "truncated",
        "text",
        "single-quotes",
        "trailing-comma",
        "nan",
        "infinity",
        "bad-utf8",
        "deep-list",
        "deep-object",
    ],
)
def test_a_body_that_is_not_json_is_a_parse_error(user_client, url, raw):
    error_of(post_raw(user_client, url, raw), 400, "parse_error")


@pytest.mark.parametrize("url", BODY_URLS)
@pytest.mark.parametrize("raw", ["null", "42", '"a string"', "true", "[]", "[1, 2]"])
def test_a_json_body_that_is_not_an_object_is_refused(user_client, url, raw):
    error_of(post_raw(user_client, url, raw), 400, "invalid")


@pytest.mark.parametrize("url", BODY_URLS)
@pytest.mark.parametrize(
    "content_type",
    ["application/x-www-form-urlencoded", "multipart/form-data; boundary=xyz", "text/plain"],
)
def test_a_body_that_is_not_declared_json_is_unsupported(user_client, url, content_type):
    error_of(post_raw(user_client, url, "message=hi", content_type), 415, "unsupported_media_type")


def test_a_form_post_creates_no_job(user_client, user):
    response = user_client.post(JOBS_URL, job_body())  # the test client's default: multipart

    error_of(response, 415)
    assert job_count(user.pk) == 0


@pytest.fixture
def small_body_limit(settings):
    """A 2 KiB body limit; the middleware reads it when a new client's handler loads."""
    settings.MAX_REQUEST_BYTES = 2048
    return 2048


def body_of_size(size: int) -> str:
    """A valid create body of exactly ``size`` bytes, its message padded to fit."""
    suffix = '", ' + json.dumps(job_body())[1:].split(", ", 1)[1]  # after "message": "hello
    prefix = '{"message": "'
    return prefix + "x" * (size - len(prefix) - len(suffix)) + suffix


def test_a_body_over_the_size_limit_is_refused_with_413(client_for, user, small_body_limit):
    raw = body_of_size(small_body_limit + 1)

    error_of(post_raw(client_for(user), JOBS_URL, raw), 413, "request_too_large")
    assert job_count(user.pk) == 0


def test_a_body_at_the_size_limit_is_accepted(client_for, user, small_body_limit):
    raw = body_of_size(small_body_limit)

    assert len(raw.encode()) == small_body_limit
    assert post_raw(client_for(user), JOBS_URL, raw).status_code == 201


def test_an_oversized_body_is_refused_before_authentication(small_body_limit):
    raw = body_of_size(small_body_limit + 1)

    error_of(post_raw(APIClient(), LOGIN_URL, raw), 413, "request_too_large")


def test_a_content_length_that_is_not_a_number_is_refused(user_client):
    response = user_client.post(
        JOBS_URL, json.dumps(job_body()), content_type="application/json", CONTENT_LENGTH="lots"
    )

    error_of(response, 400)


def test_a_request_declaring_more_than_the_default_limit_is_refused_unread(user_client, settings):
    """The guard goes by Content-Length, so it never reads the huge body it refuses."""
    response = user_client.post(
        JOBS_URL,
        "{}",
        content_type="application/json",
        CONTENT_LENGTH=str(settings.MAX_REQUEST_BYTES + 1),
    )

    error_of(response, 413, "request_too_large")


# --- field values ---------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=3)
    ),
    max_leaves=8,
)
create_bodies = (
    json_values
    | st.fixed_dictionaries({"message": json_values, "execute_at": json_values})
    | st.lists(
        st.fixed_dictionaries({"message": json_values, "execute_at": json_values}), max_size=3
    )
)


@hypothesis_settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=create_bodies)
def test_any_json_create_body_gets_201_or_a_400_envelope(user_client, body):
    response = user_client.post(
        JOBS_URL, json.dumps(body, allow_nan=False), content_type="application/json"
    )

    if response.status_code != 201:
        error_of(response, 400)


@pytest.mark.parametrize(
    "execute_at",
    ["2030-01-01T00:00:00", "tomorrow", "2030-13-01T00:00:00Z", "9999-12-31T23:59:59-23:59", 0, []],
)
def test_an_unusable_execute_at_is_a_400_naming_the_field(user_client, execute_at):
    body = {"message": "m", "execute_at": execute_at}

    error = error_of(user_client.post(JOBS_URL, body, format="json"), 400, "invalid")

    assert list(error["fields"]) == ["execute_at"]
    assert error["message"].startswith("execute_at: ")


@pytest.mark.parametrize("message", ["nul\x00char", "\ud800", 12, None])
def test_an_unusable_message_is_a_400_naming_the_field(user_client, message):
    body = {"message": message, "execute_at": job_body()["execute_at"]}
    raw = json.dumps(body)  # writes a lone surrogate as the escape \ud800, as a client would

    error = error_of(post_raw(user_client, JOBS_URL, raw), 400, "invalid")

    assert list(error["fields"]) == ["message"]


def test_a_message_over_the_byte_limit_is_refused(user_client, user, settings):
    settings.MAX_MESSAGE_BYTES = 10

    error = error_of(post_raw(user_client, JOBS_URL, json.dumps(job_body("é" * 6))), 400)

    assert "message" in error["fields"]
    assert job_count(user.pk) == 0


# --- job ids in the URL ---------------------------------------------------------------------

MALFORMED_IDS = ["abc", "z" * 27, "0" * 26 + "-", "0" * 28, "0" * 26 + "%20", "%C3%A9" * 27]


@pytest.mark.parametrize("job_id", MALFORMED_IDS)
def test_get_with_a_malformed_job_id_is_400(user_client, job_id):
    error_of(user_client.get(job_url(job_id)), 400, "invalid")


@pytest.mark.parametrize("job_id", MALFORMED_IDS)
def test_cancel_with_a_malformed_job_id_is_400(user_client, job_id):
    error_of(user_client.post(cancel_url(job_id)), 400, "invalid")


def shards_that_do_not_exist() -> list[int]:
    return [shard_count(), 9999, 65535]


@pytest.mark.parametrize("shard_id", shards_that_do_not_exist())
def test_a_job_id_naming_a_shard_that_does_not_exist_is_404(user_client, shard_id):
    job_id = new_job_id(shard_id=shard_id)

    error_of(user_client.get(job_url(job_id)), 404, "job_not_found")
    error_of(user_client.post(cancel_url(job_id)), 404, "job_not_found")


def test_a_well_formed_id_of_no_job_is_404(user_client):
    job_id = new_job_id(shard_id=0)

    error_of(user_client.get(job_url(job_id)), 404, "job_not_found")
    error_of(user_client.post(cancel_url(job_id)), 404, "job_not_found")


def test_another_users_job_is_404_and_left_unchanged(user_client, other_client):
    theirs = create_job(other_client)

    error_of(user_client.get(job_url(theirs["id"])), 404, "job_not_found")
    error_of(user_client.post(cancel_url(theirs["id"])), 404, "job_not_found")

    assert stored_job(theirs["id"]).status == "scheduled"


def test_cancelling_another_users_running_job_is_404_not_409(user_client, other_client):
    theirs = create_job(other_client)
    set_status(theirs["id"], "running")

    error_of(user_client.post(cancel_url(theirs["id"])), 404, "job_not_found")


# --- URLs and methods -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["/api/v1/nope", "/nope", "/api/v2/me/jobs", "/api/v1/me/jobs/", "/api/v1/me/jobs/a/b"],
)
def test_an_unknown_url_is_a_404_json_envelope(user_client, url):
    error_of(user_client.get(url), 404, "not_found")


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("put", JOBS_URL),
        ("delete", JOBS_URL),
        ("patch", JOBS_URL),
        ("delete", job_url(new_job_id(shard_id=0))),
        ("put", job_url(new_job_id(shard_id=0))),
        ("get", cancel_url(new_job_id(shard_id=0))),
        ("get", USERS_URL),
        ("get", LOGIN_URL),
    ],
)
def test_a_wrong_method_is_a_405_envelope(user_client, method, url):
    response = getattr(user_client, method)(url)

    error_of(response, 405, "method_not_allowed")
    assert method.upper() not in response["Allow"]


# --- the lifecycle endpoints ----------------------------------------------------------------

lifecycle_keys = st.sampled_from(
    [
        "status",
        "execute_at",
        "execute_at_from",
        "execute_at_to",
        "handler",
        "delay_seconds",
        "message",
        "extra_attempts",
        "priority",
        "user_id",
    ]
)
lifecycle_bodies = json_values | st.dictionaries(lifecycle_keys, json_values, max_size=4)
_fuzz = hypothesis_settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_fuzz
@given(body=lifecycle_bodies)
def test_any_json_bulk_body_gets_200_or_a_400_envelope(user_client, body):
    raw = json.dumps(body, allow_nan=False)
    for url in (f"{JOBS_URL}/cancel", f"{JOBS_URL}/retry"):
        response = post_raw(user_client, url, raw)
        if response.status_code != 200:
            error_of(response, 400)


@_fuzz
@given(body=lifecycle_bodies)
def test_any_json_reschedule_or_retry_body_gets_200_or_a_4xx_envelope(user_client, body):
    job_id = create_job(user_client)["id"]
    raw = json.dumps(body, allow_nan=False)
    for action in ("reschedule", "retry"):
        response = post_raw(user_client, f"{JOBS_URL}/{job_id}/{action}", raw)
        if response.status_code != 200:
            assert response.status_code in (400, 409), response.content
            error_of(response, response.status_code)


@_fuzz
@given(body=lifecycle_bodies)
def test_any_json_redrive_body_gets_200_or_a_400_envelope(staff_client, body):
    response = post_raw(staff_client, "/api/v1/jobs/redrive", json.dumps(body, allow_nan=False))

    if response.status_code != 200:
        error_of(response, 400)


@_fuzz
@given(
    extra=st.dictionaries(
        st.sampled_from(["delay_seconds", "priority", "max_attempts", "timeout_seconds"]),
        json_values,
        max_size=3,
    )
)
def test_any_json_create_option_gets_201_or_a_400_envelope(user_client, extra):
    body = {"message": "m"} | extra if "delay_seconds" in extra else job_body() | extra
    response = post_raw(user_client, JOBS_URL, json.dumps(body, allow_nan=False))

    if response.status_code != 201:
        error_of(response, 400)


@pytest.mark.parametrize("url", [f"{JOBS_URL}/cancel", f"{JOBS_URL}/retry"])
@pytest.mark.parametrize("raw", ["{", "not json", b"\xff\xfe\x00", "[" * 100_000])
def test_a_bulk_body_that_is_not_json_is_a_400(user_client, url, raw):
    error_of(post_raw(user_client, url, raw), 400)
