"""Every error becomes {"success": false, "error": {"code", "message", "fields"}}."""

from __future__ import annotations

import psycopg
import pytest
from django import db
from django.http import Http404
from rest_framework import exceptions as drf
from rest_framework_simplejwt.exceptions import InvalidToken

from jobsvc import errors
from jobsvc.api.errors import _summary, exception_handler


def handle(exc: Exception):
    response = exception_handler(exc, {})
    assert response is not None
    return response.status_code, response.data


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (errors.JobNotFound("No job."), 404, "job_not_found"),
        (errors.NotFound("Nothing."), 404, "not_found"),
        (errors.JobNotCancellable("Running."), 409, "job_not_cancellable"),
        (errors.IdempotencyKeyReused("Reused."), 422, "idempotency_key_reused"),
        (errors.SignupDisabled("Off."), 403, "signup_disabled"),
        (errors.JobWeightNeedsStaff("Staff."), 403, "job_weight_needs_staff"),
        (errors.InvalidInput("Bad."), 400, "invalid"),
        (errors.ServiceError("Other."), 400, "error"),
    ],
)
def test_a_service_error_maps_to_its_status_and_code(exc, status, code):
    assert handle(exc) == (
        status,
        {"success": False, "error": {"code": code, "message": exc.message, "fields": {}}},
    )


def test_a_service_error_keeps_its_field_errors():
    exc = errors.InvalidInput("username: taken.", fields={"username": ["Taken."]})

    assert handle(exc)[1]["error"]["fields"] == {"username": ["Taken."]}


def test_a_validation_error_reports_the_first_problem_and_all_fields():
    exc = drf.ValidationError({"message": ["Too long."], "execute_at": ["Required."]})

    status, body = handle(exc)

    assert status == 400
    assert body["error"] == {
        "code": "invalid",
        "message": "message: Too long.",
        "fields": {"message": ["Too long."], "execute_at": ["Required."]},
    }


def test_a_bulk_validation_error_reports_each_bad_item_under_its_index():
    exc = drf.ValidationError([{}, {}, {"message": ["Must be a string."]}, {}])

    body = handle(exc)[1]

    assert body["error"]["message"] == "[2].message: Must be a string."
    assert body["error"]["fields"] == {"2": {"message": ["Must be a string."]}}


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (drf.NotAuthenticated(), 401, "not_authenticated"),
        (drf.AuthenticationFailed("User is inactive", code="user_inactive"), 401, "user_inactive"),
        (drf.ParseError(), 400, "parse_error"),
        (drf.UnsupportedMediaType("text/plain"), 415, "unsupported_media_type"),
        (drf.MethodNotAllowed("PUT"), 405, "method_not_allowed"),
        (drf.Throttled(wait=5), 429, "throttled"),
        (Http404(), 404, "not_found"),
    ],
)
def test_a_framework_error_keeps_its_status_and_gets_the_envelope(exc, status, code):
    got_status, body = handle(exc)

    assert got_status == status
    assert body["success"] is False
    assert body["error"]["code"] == code
    assert body["error"]["message"]


def test_a_throttled_response_says_when_to_retry():
    response = exception_handler(drf.Throttled(wait=7), {})

    assert response["Retry-After"] == "7"


def test_a_rejected_token_gets_a_readable_message_not_a_python_repr():
    exc = InvalidToken({"detail": "Given token not valid for any token type", "messages": []})

    status, body = handle(exc)

    assert status == 401
    assert body["error"]["code"] == "token_not_valid"
    assert body["error"]["message"] == "Given token not valid for any token type"


def test_an_unexpected_exception_is_left_to_the_500_handler():
    assert exception_handler(RuntimeError("bug"), {}) is None


@pytest.mark.parametrize(
    ("detail", "summary"),
    [
        ({"non_field_errors": ["Expected a list."]}, "Expected a list."),
        ({"password": ["Too short.", "Too common."]}, "password: Too short."),
        ([{}, {"non_field_errors": ["Expected an object."]}], "[1]: Expected an object."),
        ([{}, {}, {"execute_at": ["Required."]}], "[2].execute_at: Required."),
        (["Just a message."], "Just a message."),
    ],
)
def test_the_summary_names_where_the_first_problem_is(detail, summary):
    assert _summary(detail) == summary


def _django_error(kind, cause: Exception) -> Exception:
    error = kind(str(cause))
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    "exc",
    [
        psycopg.errors.DiskFull("could not extend file"),  # raised by a COPY, unwrapped
        _django_error(db.InternalError, psycopg.errors.IdleInTransactionSessionTimeout("idle")),
        _django_error(db.DatabaseError, psycopg.errors.QueryCanceled("statement timeout")),
        _django_error(db.DatabaseError, psycopg.errors.AdminShutdown("terminating")),
        db.OperationalError("connection refused"),
    ],
    ids=["disk-full", "idle-timeout", "statement-timeout", "admin-shutdown", "unreachable"],
)
def test_a_database_at_fault_is_a_503_not_a_500(exc):
    status, body = handle(exc)
    assert status == 503 and body["error"]["code"] == "database_unavailable"


def test_a_database_error_the_request_caused_is_still_a_bug():
    assert (
        exception_handler(
            _django_error(db.DataError, psycopg.errors.NumericValueOutOfRange("x")), {}
        )
        is None
    )
