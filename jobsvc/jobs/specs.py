"""Validation of job-create requests, written for speed: a bulk request holds 1,000 jobs.

DRF serializers cost tens of microseconds per field; this module checks the same rules in
plain Python and reports problems in the same shape (``{field: [message, ...]}``).
``JobCreateInput`` in ``serializers.py`` documents the shape for the OpenAPI schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils.dateparse import parse_datetime

from jobsvc.jobs.handler_specs import DEFAULT_HANDLER, HandlerSpecError, validate_handler
from jobsvc.jobs.models import PRIORITY_DEFAULT, PRIORITY_MAX, PRIORITY_MIN

FieldErrors = dict[str, list[str]]


@dataclass(frozen=True)
class JobSpec:
    """A validated request for one job."""

    message: str
    execute_at: datetime  # aware, UTC
    max_attempts: int
    timeout_seconds: float
    handler: str = DEFAULT_HANDLER
    handler_params: dict = field(default_factory=dict)
    # Set when the request gave delay_seconds: execute_at is then now + the delay, and a
    # retry of the request is the same request whenever it is sent.
    delay_seconds: float | None = None
    priority: int = PRIORITY_DEFAULT  # among the user's own due jobs; higher runs first


class SpecErrors(Exception):
    """Raised with the per-field (or, for a bulk request, per-index) problems found."""

    def __init__(self, detail: dict[str, Any] | list[Any]) -> None:
        super().__init__("invalid job request")
        self.detail = detail


CREATE_FIELDS = (
    "message",
    "execute_at",
    "delay_seconds",
    "handler",
    "handler_params",
    "max_attempts",
    "timeout_seconds",
    "priority",
)


def parse_job_spec(raw: Any, *, now: datetime, user_id: int | None = None) -> JobSpec:
    """Validate one job request body; raise SpecErrors with field errors.

    ``user_id``: the job's owner, whose handler grants are checked (None: not checked).
    A field this API does not know is refused, never ignored: a misspelt option would
    otherwise silently take its default.
    """
    errors: FieldErrors = {}
    if not isinstance(raw, dict):
        raise SpecErrors(
            {"non_field_errors": ["Expected a JSON object with message and execute_at."]}
        )
    if not raw.keys() <= _CREATE_FIELD_SET:
        for name in sorted(set(raw) - _CREATE_FIELD_SET, key=str):
            errors[name] = [f"Unknown field; one of {', '.join(CREATE_FIELDS)}."]
    message = _check_message(raw.get("message", _MISSING), errors)
    execute_at, delay_seconds = _check_due(raw, errors, now=now)
    max_attempts = _check_number(
        raw,
        "max_attempts",
        errors,
        default=settings.JOB_DEFAULT_MAX_ATTEMPTS,
        low=1,
        high=settings.JOB_MAX_ATTEMPTS_LIMIT,
        integer=True,
    )
    timeout_seconds = _check_number(
        raw,
        "timeout_seconds",
        errors,
        default=settings.JOB_DEFAULT_TIMEOUT_SECONDS,
        low=0.001,
        high=settings.JOB_TIMEOUT_LIMIT_SECONDS,
        integer=False,
    )
    priority = _check_number(
        raw,
        "priority",
        errors,
        default=PRIORITY_DEFAULT,
        low=PRIORITY_MIN,
        high=PRIORITY_MAX,
        integer=True,
    )
    handler, handler_params = DEFAULT_HANDLER, {}
    if raw.get("handler") is not None or raw.get("handler_params") is not None:
        try:
            handler, handler_params = validate_handler(
                name=raw.get("handler"), params=raw.get("handler_params"), user_id=user_id
            )
        except HandlerSpecError as exc:
            errors[exc.field] = [str(exc)]
    if errors:
        raise SpecErrors(errors)
    return JobSpec(
        message=message,
        execute_at=execute_at,
        max_attempts=max_attempts,
        timeout_seconds=float(timeout_seconds),  # 30 and 30.0 are one request
        handler=handler,
        handler_params=handler_params,
        delay_seconds=delay_seconds,
        priority=priority,
    )


_CREATE_FIELD_SET = frozenset(CREATE_FIELDS)


@dataclass(frozen=True)
class RescheduleSpec:
    """A validated reschedule: the new due time and/or the new message."""

    execute_at: datetime | None  # aware, UTC; None keeps the job's time
    message: str | None  # None keeps the job's message


RESCHEDULE_FIELDS = ("execute_at", "delay_seconds", "message")


def parse_reschedule(raw: Any, *, now: datetime) -> RescheduleSpec:
    """Validate a reschedule body: execute_at or delay_seconds, and/or message."""
    if not isinstance(raw, dict) or not any(
        raw.get(name) is not None for name in RESCHEDULE_FIELDS
    ):
        raise SpecErrors(
            {"non_field_errors": ["Give execute_at or delay_seconds, and/or message."]}
        )
    errors: FieldErrors = {}
    for name in sorted(set(raw) - set(RESCHEDULE_FIELDS)):
        errors[name] = ["Only execute_at (or delay_seconds) and message can be changed."]
    for name in RESCHEDULE_FIELDS:
        if name in raw and raw[name] is None:
            errors[name] = ["May not be null: leave the field out to keep it as it is."]
    execute_at = None
    if raw.get("execute_at") is not None or raw.get("delay_seconds") is not None:
        execute_at, _ = _check_due(raw, errors, now=now)
    message = None
    if raw.get("message") is not None:
        message = _check_message(raw["message"], errors)
    if errors:
        raise SpecErrors(errors)
    return RescheduleSpec(execute_at=execute_at, message=message)


def parse_job_specs(raw: Any, *, now: datetime, user_id: int | None = None) -> list[JobSpec]:
    """Validate a bulk request (a JSON list); all jobs must be valid, or none is created."""
    limit = settings.MAX_BULK_JOBS
    if not isinstance(raw, list) or not raw:
        raise SpecErrors({"non_field_errors": [f"Expected a list of 1 to {limit} jobs."]})
    if len(raw) > limit:
        raise SpecErrors(
            {"non_field_errors": [f"At most {limit} jobs per request, got {len(raw)}."]}
        )
    specs: list[JobSpec] = []
    problems: list[Any] = []
    for item in raw:
        try:
            specs.append(parse_job_spec(item, now=now, user_id=user_id))
            problems.append({})
        except SpecErrors as exc:
            problems.append(exc.detail)
    if any(problems):
        raise SpecErrors(problems)
    return specs


_MISSING = object()


def _check_message(value: Any, errors: FieldErrors) -> str:
    if value is _MISSING or value is None:
        errors["message"] = ["This field is required."]
        return ""
    if not isinstance(value, str):
        errors["message"] = ["Must be a string."]
        return ""
    limit = settings.MAX_MESSAGE_BYTES
    if len(value) > limit or len(value.encode("utf-8", "surrogatepass")) > limit:
        errors["message"] = [f"At most {limit} bytes of UTF-8."]
    elif "\x00" in value:
        errors["message"] = ["Must not contain NUL (\\u0000) characters."]
    else:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            errors["message"] = ["Must be valid Unicode (no unpaired surrogates)."]
    return value


def _check_number(raw: dict, name: str, errors: FieldErrors, *, default, low, high, integer: bool):
    value = raw.get(name)
    if value is None:
        return default
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        errors[name] = ["Must be a whole number." if integer else "Must be a number."]
        return default
    if not low <= value <= high:
        errors[name] = [f"Must be between {_plain(low)} and {_plain(high)}."]
        return default
    return value


def _plain(number: float) -> str:
    """A bound as people write it: 31536000, not 3.1536e+07; 0.001 stays 0.001."""
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


def _check_due(raw: dict, errors: FieldErrors, *, now: datetime) -> tuple[datetime, float | None]:
    """execute_at, or delay_seconds from now: exactly one of the two.

    Neither may be null beside the other (the schema's oneOf counts a null as given);
    alone, a null is a missing time.
    """
    execute_at, delay = raw.get("execute_at"), raw.get("delay_seconds")
    if execute_at is not None and delay is not None:
        errors["delay_seconds"] = ["Give execute_at or delay_seconds, not both."]
        return now, None
    for name, other in (("execute_at", delay), ("delay_seconds", execute_at)):
        if name in raw and raw[name] is None and other is not None:
            errors[name] = ["May not be null: leave the field out."]
            return now, None
    if delay is None:
        return _check_execute_at(execute_at, errors, now=now), None
    horizon_seconds = settings.MAX_SCHEDULE_HORIZON.total_seconds()
    delay = _check_number(
        raw, "delay_seconds", errors, default=0.0, low=0, high=horizon_seconds, integer=False
    )
    return now + timedelta(seconds=delay), float(delay)


def _check_execute_at(value: Any, errors: FieldErrors, *, now: datetime) -> datetime:
    if value is _MISSING or value is None:
        errors["execute_at"] = ["This field is required (or give delay_seconds instead)."]
        return now
    parsed = parse_aware_datetime(value)
    if isinstance(parsed, str):
        errors["execute_at"] = [parsed]
        return now
    horizon: timedelta = settings.MAX_SCHEDULE_HORIZON
    if parsed > now + horizon:
        errors["execute_at"] = [f"Must be at most {horizon.days} days in the future."]
    elif parsed < now - horizon:
        errors["execute_at"] = [f"Must be at most {horizon.days} days in the past."]
    return parsed


def parse_aware_datetime(value: Any) -> datetime | str:
    """Parse an ISO 8601 time with a zone into UTC; return an error message instead if not."""
    if not isinstance(value, str):
        return "Must be an ISO 8601 date-time string, e.g. 2030-01-01T12:00:00Z."
    try:
        parsed = parse_datetime(value.strip()) if len(value) <= 64 else None
    except ValueError:
        return "Not a valid date-time (a field is out of range)."
    if parsed is None:
        return "Not an ISO 8601 date-time, e.g. 2030-01-01T12:00:00Z."
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        return "Needs a time zone, e.g. 2030-01-01T12:00:00Z or 2030-01-01T19:00:00+07:00."
    try:
        return parsed.astimezone(UTC)
    except (OverflowError, ValueError):
        return "Not a valid date-time (out of range)."
