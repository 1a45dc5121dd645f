"""A NUL or an unpaired surrogate anywhere in a request body, keys included, and numbers
too large for a float, are a 400 naming where they are: never a 500, never stored."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from tests.api.support import (
    BULK_CANCEL_URL,
    JOBS_URL,
    LOGIN_URL,
    RETRY_MANY_URL,
    USERS_URL,
    create_job,
    error_of,
    job_count,
    reschedule_url,
    retry_url,
)

pytestmark = pytest.mark.django_db(databases="__all__")


def post_json(client, url: str, body) -> object:
    """``body`` as a client writes it: a lone surrogate becomes the escape \\ud800."""
    return client.post(url, json.dumps(body, ensure_ascii=True), content_type="application/json")


def test_a_lone_surrogate_in_a_handler_params_key_is_a_400(user_client, user):
    body = {"message": "m", "delay_seconds": 60, "handler_params": {"\ud800": 1}}

    error = error_of(post_json(user_client, JOBS_URL, body), 400, "invalid")

    assert list(error["fields"]) == ["handler_params"]
    assert job_count(user.pk) == 0


def test_a_lone_surrogate_as_a_reschedule_field_is_a_400(user_client):
    job = create_job(user_client)

    error = error_of(post_json(user_client, reschedule_url(job["id"]), {"\udc00": 1}), 400)

    assert list(error["fields"]) == ["\\udc00"]


@pytest.mark.parametrize("url", [BULK_CANCEL_URL, RETRY_MANY_URL])
def test_a_lone_surrogate_as_a_bulk_filter_field_is_a_400(user_client, url):
    error_of(post_json(user_client, url, {"\ud800": ["scheduled"]}), 400, "invalid")


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        (USERS_URL, {"username": "sam", "password": "p\x00ssword long"}, "password"),
        (USERS_URL, {"username": "sam\ud800", "password": "a long passphrase 42"}, "username"),
        (LOGIN_URL, {"username": "sam", "password": "\udfff"}, "password"),
        (JOBS_URL, [{"message": "ok", "delay_seconds": 1}, {"message": "\x00"}], "1"),
        (JOBS_URL, {"message": "m", "delay_seconds": 1, "handler": "de\x00fault"}, "handler"),
    ],
)
def test_nul_or_a_surrogate_in_any_body_is_a_400_naming_the_field(
    api_client, user_client, url, body, field
):
    client = user_client if url == JOBS_URL else api_client

    error = error_of(post_json(client, url, body), 400, "invalid")

    assert list(error["fields"]) == [field]


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1E309"])
def test_a_number_too_large_for_a_float_is_a_400(user_client, number):
    raw = f'{{"message": "m", "delay_seconds": {number}}}'

    error_of(user_client.post(JOBS_URL, raw, content_type="application/json"), 400, "parse_error")


@pytest.mark.parametrize("url", [retry_url, reschedule_url])
def test_a_lone_surrogate_in_a_job_action_body_is_a_400(user_client, url):
    job = create_job(user_client)

    error_of(post_json(user_client, url(job["id"]), {"extra_attempts": "\ud800"}), 400)


hostile_text = st.text(
    alphabet=st.characters(codec=None, categories=None)
    | st.sampled_from(["\x00", "\ud800", "\udfff", "é"]),
    max_size=8,
)
hostile_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | hostile_text,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(hostile_text, children, max_size=3)
    ),
    max_leaves=6,
)
field_names = st.sampled_from(
    ["message", "execute_at", "delay_seconds", "handler", "handler_params", "status",
     "execute_at_from", "extra_attempts", "username", "password", "job_weight"]
)  # fmt: skip
hostile_bodies = st.dictionaries(field_names | hostile_text, hostile_values, max_size=4)


@hypothesis_settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=hostile_bodies | st.lists(hostile_bodies, max_size=2))
def test_any_body_with_hostile_text_gets_a_success_or_a_4xx_envelope(user_client, body):
    for url in (JOBS_URL, BULK_CANCEL_URL, RETRY_MANY_URL, USERS_URL, LOGIN_URL):
        raw = json.dumps(body, ensure_ascii=True, allow_nan=False)
        response = user_client.post(url, raw, content_type="application/json")
        if response.status_code >= 300:
            assert response.status_code < 500, response.content
            error_of(response, response.status_code)
