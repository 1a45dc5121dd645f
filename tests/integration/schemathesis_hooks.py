"""Schemathesis hooks for the rules the OpenAPI schema cannot state (each is written in
its operation's description), so generated requests the API would refuse for those
rules alone are made valid (or skipped) instead of reported as schema-valid refusals.

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

django.setup()

from jobsvc.accounts.models import User  # noqa: E402 (needs the apps loaded)

JOBS = "/api/v1/me/jobs"
USERS = "/api/v1/users"
HORIZON = timedelta(days=360)  # inside JOBSVC_MAX_SCHEDULE_HORIZON_DAYS (365) either side


IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")  # jobsvc.jobs.apis accepts these
FILTERS = {f"{JOBS}/cancel", f"{JOBS}/retry", "/api/v1/jobs/redrive"}
FILTER_CRITERIA = ("status", "execute_at_from", "execute_at_to", "handler", "user_id")
FILTER_FIELDS = (*FILTER_CRITERIA, "extra_attempts")


@schemathesis.hook
def map_case(context, case):
    if case.method.upper() != "POST":
        return case
    path = case.operation.path
    if path == JOBS:
        _fresh_idempotency_key(case)
        if isinstance(case.body, list):
            case.body = [_job_within_rules(job) for job in case.body]
        else:
            case.body = _job_within_rules(case.body)
    elif path.endswith("/reschedule"):
        case.body = _reschedule_within_rules(case.body)
    elif path in FILTERS:
        case.body = _filter_within_rules(case.body)
    return case


def _fresh_idempotency_key(case) -> None:
    """A valid Idempotency-Key of its own per create: the same key with another body is a
    422 (a rule over two requests, in the header's description), and generated requests
    repeat the schema's example keys."""
    key = (case.headers or {}).get("Idempotency-Key")
    if isinstance(key, str) and IDEMPOTENCY_KEY.fullmatch(key):
        case.headers["Idempotency-Key"] = uuid.uuid4().hex


def _due_within_rules(body: dict) -> None:
    """execute_at within the horizon of *now* (a schema has no "now"), and exactly one of
    execute_at and delay_seconds."""
    execute_at = body.get("execute_at")
    if isinstance(execute_at, str):
        try:
            when = datetime.fromisoformat(execute_at.replace("Z", "+00:00"))
        except ValueError:
            when = None
        if when is not None and when.tzinfo is not None:
            now = datetime.now(UTC)
            if not now - HORIZON <= when <= now + HORIZON:
                body["execute_at"] = (now + timedelta(minutes=5)).isoformat()
    if "execute_at" in body and "delay_seconds" in body:
        del body["delay_seconds"]


def _reschedule_within_rules(body):
    if not isinstance(body, dict):
        return body
    body = dict(body)
    _due_within_rules(body)
    if not body.keys() & {"execute_at", "delay_seconds", "message"}:
        body["message"] = "rescheduled"  # at least one change
    return body


def _filter_within_rules(body):
    """A bulk action's filter: known fields only, and at least one criterion."""
    if not isinstance(body, dict):
        return body
    body = {name: value for name, value in body.items() if name in FILTER_FIELDS}
    if not body.keys() & set(FILTER_CRITERIA):
        body["handler"] = "default"
    start, end = _instant(body.get("execute_at_from")), _instant(body.get("execute_at_to"))
    if start is not None and end is not None and end <= start:
        del body["execute_at_to"]  # the range must not be empty
    return body


def _instant(value) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _job_within_rules(body):
    if not isinstance(body, dict):
        return body
    body = dict(body)
    _due_within_rules(body)
    if "execute_at" not in body and "delay_seconds" not in body:
        body["delay_seconds"] = 60
    # A handler's params are checked against deployment settings (allowed hosts, topics).
    if body.get("handler") in ("http", "kafka") or "handler_params" in body:
        body.pop("handler_params", None)
        if body.get("handler") in ("http", "kafka"):
            body["handler"] = "default"
    return body


@schemathesis.hook
def filter_body(context, body):
    operation = context.operation
    if operation is None or operation.path != USERS or not isinstance(body, dict):
        return True
    password, username = body.get("password"), body.get("username")
    if not isinstance(password, str) or not isinstance(username, str):
        return True
    # Django's password validators (common passwords, likeness to the username).
    try:
        password_validation.validate_password(password, user=User(username=username))
    except ValidationError:
        return False
    return True
