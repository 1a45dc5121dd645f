"""Schemathesis hooks for the rules the OpenAPI schema cannot state (each is written in
its operation's description), so generated requests the API would refuse for those
rules alone are made valid (or skipped) instead of reported as schema-valid refusals.

Loaded by the schemathesis process through SCHEMATHESIS_HOOKS
(tests/integration/test_openapi_fidelity.py).
"""

from __future__ import annotations

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


@schemathesis.hook
def map_case(context, case):
    if case.operation.path == JOBS and case.method.upper() == "POST":
        case.body = _job_within_rules(case.body)
    return case


def _job_within_rules(body):
    if not isinstance(body, dict):
        return body
    body = dict(body)
    # execute_at must be within the horizon of *now*; a schema has no "now".
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
