"""Every response carries an ``X-Request-ID``, and every log line of the request names it."""

from __future__ import annotations

import io
import logging
import re
from contextlib import contextmanager

import pytest

from jobsvc.logs import RequestIdFilter
from tests.api.support import JOBS_URL, job_body, job_url, post_jobs

pytestmark = pytest.mark.django_db(databases="__all__")

MISSING_JOB = "2ZZZZZZZZZZZZZZZZZZZZZZZZZZ"


@contextmanager
def console_output():
    """What the configured console handler (LOGGING in the settings) writes meanwhile."""
    [console] = [
        handler
        for handler in logging.getLogger().handlers
        if any(isinstance(f, RequestIdFilter) for f in handler.filters)
    ]
    stream = io.StringIO()
    previous = console.setStream(stream)
    try:
        yield stream
    finally:
        console.setStream(previous)


def test_a_callers_request_id_is_echoed(user_client):
    response = user_client.get(JOBS_URL, HTTP_X_REQUEST_ID="trace-0f3a:7")

    assert response.status_code == 200
    assert response["X-Request-ID"] == "trace-0f3a:7"


@pytest.mark.parametrize("given", [None, "", "has space", "x" * 129, 'quote"d', "é"])
def test_a_missing_or_odd_request_id_is_replaced_by_a_new_one(user_client, given):
    headers = {} if given is None else {"HTTP_X_REQUEST_ID": given}

    first = user_client.get(JOBS_URL, **headers)
    second = user_client.get(JOBS_URL, **headers)

    assert re.fullmatch(r"[0-9a-f]{32}", first["X-Request-ID"])
    assert first["X-Request-ID"] != second["X-Request-ID"]


def test_errors_and_unauthenticated_requests_carry_an_id_too(api_client, user_client):
    assert api_client.get(JOBS_URL, HTTP_X_REQUEST_ID="anon-1")["X-Request-ID"] == "anon-1"
    missing = user_client.get(job_url(MISSING_JOB), HTTP_X_REQUEST_ID="gone-1")
    assert missing.status_code == 404
    assert missing["X-Request-ID"] == "gone-1"
    created = post_jobs(user_client, job_body())
    assert created.status_code == 201
    assert created["X-Request-ID"]


def test_every_log_line_of_a_request_names_its_id(user_client):
    with console_output() as output:
        response = user_client.get(job_url(MISSING_JOB), HTTP_X_REQUEST_ID="logged-7")
        logging.getLogger("jobsvc.test").warning("outside any request")

    assert response.status_code == 404
    lines = output.getvalue().splitlines()
    of_the_request = [line for line in lines if "outside any request" not in line]
    assert of_the_request, "the 404 is logged (django.request)"
    assert all("logged-7" in line for line in of_the_request)
    assert not any("logged-7" in line for line in lines if "outside any request" in line)
