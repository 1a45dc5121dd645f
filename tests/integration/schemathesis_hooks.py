"""Schemathesis hooks for the rules the OpenAPI schema cannot state (each is written in
its operation's description), so generated requests the API would refuse for those
rules alone are made valid instead of reported as schema-valid refusals.

What a schema can state, it states (jobsvc.jobs.schema: exactly one of execute_at and
delay_seconds, at least one filter criterion and no unknown one, at most one of
execute_at and delay_seconds in a reschedule); these hooks cover only the rest:

- a time must lie within JOBSVC_MAX_SCHEDULE_HORIZON_DAYS of *now* (a schema has no now);
- a message is at most JOBSVC_MAX_MESSAGE_BYTES of UTF-8 (``maxLength`` counts characters);
- a bulk filter's execute_at_to must be later than its execute_at_from;
- handler parameters are checked against the deployment's allow-lists;
- a password must pass Django's validators (common passwords, likeness to the username);
- a password change must name the current password (the run's user's, which a valid
  change keeps: schemathesis sends a case more than once, so a case must not change
  what the next sending of it needs).

A body schemathesis generated to break the schema (negative mode) is left as it is: the
API must refuse it whatever these rules say.

Every request gets a token of its own (``FreshToken``), minted in this process for the
run's user (SCHEMATHESIS_USERNAME): a refresh, a log-out or a password change revokes
tokens, and must revoke none the following requests use.

Loaded by the schemathesis process through SCHEMATHESIS_HOOKS
(tests/integration/test_openapi_fidelity.py).
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import django
import schemathesis
from django.contrib.auth import password_validation
from django.core.exceptions import ValidationError
from schemathesis.core.parameters import ParameterLocation

django.setup()

import os  # noqa: E402

from django.conf import settings  # noqa: E402 (needs the apps loaded)

from jobsvc.accounts.models import User  # noqa: E402
from jobsvc.accounts.tokens import token_issue  # noqa: E402

JOBS = "/api/v1/me/jobs"
USERS = "/api/v1/users"
PASSWORD = "/api/v1/me/password"
HORIZON = timedelta(days=360)  # inside JOBSVC_MAX_SCHEDULE_HORIZON_DAYS (365) either side
IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")  # jobsvc.jobs.apis accepts these
FILTERS = {f"{JOBS}/cancel", f"{JOBS}/retry", "/api/v1/jobs/redrive"}
USERNAME = os.environ["SCHEMATHESIS_USERNAME"]
PASSWORD_OF_USER = os.environ["SCHEMATHESIS_PASSWORD"]


@schemathesis.auth(refresh_interval=None)
class FreshToken:
    """A new token for every request, for the user as the database has them now."""

    def get(self, case, context) -> str:
        return token_issue(user=User.objects.get(username=USERNAME)).token

    def set(self, case, data: str, context) -> None:
        case.headers = case.headers or {}
        case.headers["Authorization"] = f"Bearer {data}"


def _body_is_negative(case) -> bool:
    meta = case.meta
    if meta is None:
        return False
    body = meta.components.get(ParameterLocation.BODY)
    return body is not None and body.mode.is_negative


@schemathesis.hook
def map_case(context, case):
    if case.method.upper() != "POST" or _body_is_negative(case):
        return case
    path = case.operation.path
    if path == JOBS:
        _fresh_idempotency_key(case)
        if isinstance(case.body, list):
            case.body = [_job_within_rules(j) if isinstance(j, dict) else j for j in case.body]
        elif isinstance(case.body, dict):
            case.body = _job_within_rules(case.body)
    elif path.endswith("/reschedule") and isinstance(case.body, dict):
        case.body = _within_rules(case.body)
    elif path in FILTERS and isinstance(case.body, dict):
        case.body = _filter_within_rules(case.body)
    elif path == PASSWORD and isinstance(case.body, dict):
        case.body = {"current_password": PASSWORD_OF_USER, "new_password": PASSWORD_OF_USER}
    return case


def _fresh_idempotency_key(case) -> None:
    """A valid Idempotency-Key of its own per create: the same key with another body is a
    422 (a rule over two requests, in the header's description), and generated requests
    repeat the schema's example keys."""
    key = (case.headers or {}).get("Idempotency-Key")
    if isinstance(key, str) and IDEMPOTENCY_KEY.fullmatch(key):
        case.headers["Idempotency-Key"] = uuid.uuid4().hex


def _within_rules(body: dict) -> dict:
    """execute_at within the horizon of now; a message within the byte limit."""
    body = dict(body)
    when = _instant(body.get("execute_at"))
    if when is not None:
        now = datetime.now(UTC)
        if not now - HORIZON <= when <= now + HORIZON:
            body["execute_at"] = (now + timedelta(minutes=5)).isoformat()
    message = body.get("message")
    if isinstance(message, str):
        encoded = message.encode("utf-8", "surrogatepass")
        if len(encoded) > settings.MAX_MESSAGE_BYTES:
            body["message"] = encoded[: settings.MAX_MESSAGE_BYTES].decode("utf-8", "ignore")
    return body


def _job_within_rules(body: dict) -> dict:
    body = _within_rules(body)
    # A handler's params are checked against deployment settings (allowed hosts, topics).
    if body.get("handler") in ("http", "kafka") or body.get("handler_params") is not None:
        body.pop("handler_params", None)
        if body.get("handler") in ("http", "kafka"):
            body["handler"] = "default"
    return body


def _filter_within_rules(body: dict) -> dict:
    """A bulk action's time range must not be empty."""
    start, end = _instant(body.get("execute_at_from")), _instant(body.get("execute_at_to"))
    if start is not None and end is not None and end <= start:
        body = dict(body)
        body["execute_at_to"] = (start + timedelta(seconds=1)).isoformat()
    return body


def _instant(value) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


@schemathesis.hook
def filter_body(context, body):
    """Drop sign-up bodies whose password Django's validators would refuse."""
    operation = context.operation
    if operation is None or not isinstance(body, dict):
        return True
    if operation.path != USERS:
        return True
    password, username = body.get("password"), body.get("username")
    if not isinstance(password, str) or not isinstance(username, str):
        return True
    try:
        password_validation.validate_password(password, user=User(username=username))
    except ValidationError:
        return False
    return True
