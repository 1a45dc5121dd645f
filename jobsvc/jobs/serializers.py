"""Response shapes of jobs, and the request shapes as the OpenAPI schema documents them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from jobsvc.api.known_fields import KnownFieldsOnly
from jobsvc.handlers.redaction import public_params
from jobsvc.jobs.models import (
    PRIORITY_DEFAULT,
    PRIORITY_MAX,
    PRIORITY_MIN,
    AttemptOutcome,
    Job,
    JobAttempt,
    JobStatus,
)
from jobsvc.jobs.selectors import JobFilter, RunningAttempt
from jobsvc.jobs.specs import parse_aware_datetime
from jobsvc.jobs.store import JobRow

NO_NUL = RegexValidator(r"^[^\x00]*$", "Null characters are not allowed.")


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def job_to_dict(job: Job | JobRow) -> dict[str, Any]:
    return {
        "id": job.id,
        "user_id": job.user_id,
        "message": job.message,
        "status": job.status,
        "execute_at": _iso(job.execute_at),
        "shard_id": job.shard_id,
        "handler": job.handler,
        "handler_params": public_params(job.handler_params),
        "priority": job.priority,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "timeout_seconds": job.timeout_seconds,
        "due_at": _iso(job.due_at),
        "last_error": job.last_error or None,
        "attempt_errors": job.attempt_errors,
        "created_at": _iso(job.created_at),
        "updated_at": _iso(job.updated_at),
        "dispatched_at": _iso(job.dispatched_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
    }


class JobCreateInput(serializers.Serializer):
    """One job. POST a JSON list of up to JOBSVC_MAX_BULK_JOBS of these to create many.

    Documentation only (``jobsvc.jobs.specs`` validates): the bounds are the settings the
    validation reads, so the schema states exactly what is accepted; null in an optional
    field means its default.
    """

    message = serializers.CharField(
        max_length=settings.MAX_MESSAGE_BYTES,
        validators=[NO_NUL],
        help_text="The job's payload: at most 64 KiB of UTF-8, no NUL characters.",
    )
    execute_at = serializers.DateTimeField(
        required=False,
        help_text="When the job is due: ISO 8601 with a time zone (Z or an offset), "
        "within 365 days of now. Exactly one of execute_at and delay_seconds.",
    )
    delay_seconds = serializers.FloatField(
        required=False,
        min_value=0,
        max_value=settings.MAX_SCHEDULE_HORIZON.total_seconds(),
        help_text="Due this many seconds after the request is received, instead of "
        "execute_at (at most the schedule horizon, 365 days by default).",
    )
    handler = serializers.ChoiceField(
        choices=sorted(settings.JOB_HANDLERS),
        required=False,
        allow_null=True,
        help_text='What runs the job: "default" (records it), "http", "kafka".',
    )
    handler_params = serializers.DictField(
        required=False,
        allow_null=True,
        help_text='http: {"url": ..., "method": "POST"|"PUT"|"PATCH", "headers": {...}}; '
        'kafka: {"topic": ...}.',
    )
    max_attempts = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=settings.JOB_MAX_ATTEMPTS_LIMIT,
        help_text="Attempts before failing.",
    )
    priority = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=PRIORITY_MIN,
        max_value=PRIORITY_MAX,
        help_text=f"Among your own due jobs, higher runs first ({PRIORITY_MIN}-{PRIORITY_MAX}, "
        f"default {PRIORITY_DEFAULT}). Fair share between users is unchanged.",
    )
    timeout_seconds = serializers.FloatField(
        required=False,
        allow_null=True,
        min_value=0.001,
        max_value=settings.JOB_TIMEOUT_LIMIT_SECONDS,
        help_text="Per-attempt timeout.",
    )


class JobRescheduleInput(serializers.Serializer):
    """A new time (execute_at or delay_seconds, not both) and/or a new message."""

    execute_at = serializers.DateTimeField(
        required=False, help_text="The new due time: ISO 8601 with a time zone."
    )
    delay_seconds = serializers.FloatField(
        required=False, min_value=0, help_text="Due this many seconds from now instead."
    )
    message = serializers.CharField(
        required=False, max_length=settings.MAX_MESSAGE_BYTES, help_text="The new message."
    )


class JobOutput(serializers.Serializer):
    id = serializers.CharField(help_text="KSUID; it also names the shard holding the job.")
    user_id = serializers.IntegerField()
    message = serializers.CharField()
    status = serializers.ChoiceField(choices=JobStatus.choices)
    execute_at = serializers.DateTimeField()
    shard_id = serializers.IntegerField()
    handler = serializers.CharField()
    handler_params = serializers.DictField()
    priority = serializers.IntegerField()
    attempts = serializers.IntegerField()
    max_attempts = serializers.IntegerField()
    timeout_seconds = serializers.FloatField()
    due_at = serializers.DateTimeField(help_text="When the next attempt is due.")
    last_error = serializers.CharField(allow_null=True)
    attempt_errors = serializers.ListField(child=serializers.DictField())
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    dispatched_at = serializers.DateTimeField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


class StrictCharField(serializers.CharField):
    """A string, and only a string: DRF's CharField would take 12 as "12"."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError("Must be a string.")
        return super().to_internal_value(data)


@extend_schema_field(OpenApiTypes.DATETIME)
class AwareDateTimeField(serializers.CharField):
    """An ISO 8601 time that must carry a zone, as everywhere in this API; read as UTC."""

    def to_internal_value(self, data: Any) -> datetime:
        parsed = parse_aware_datetime(data)
        if isinstance(parsed, str):
            raise serializers.ValidationError(parsed)
        return parsed

    def to_representation(self, value: datetime) -> str | None:
        return _iso(value)


class JobFilterInput(KnownFieldsOnly):
    """Which of the caller's jobs a bulk action applies to; at least one criterion.

    ``allowed_statuses`` (from the view's context) are the statuses the action can
    change; the status filter may name only those, and defaults to all of them.
    """

    status = serializers.ListField(
        child=StrictCharField(),
        required=False,
        allow_empty=False,
        min_length=1,
        help_text="Statuses to include (default: every status the action applies to).",
    )
    execute_at_from = AwareDateTimeField(
        required=False, help_text="Inclusive; ISO 8601 with a time zone."
    )
    execute_at_to = AwareDateTimeField(
        required=False, help_text="Exclusive; ISO 8601 with a time zone."
    )
    # Matched exactly, as stored: not trimmed (a name of only "whitespace", such as
    # U+001F, is a non-empty string the schema allows, and simply matches no job).
    handler = StrictCharField(
        required=False,
        min_length=1,
        max_length=64,
        trim_whitespace=False,
        validators=[NO_NUL],  # stated in the schema: PostgreSQL text cannot hold one
        help_text="Handler name (no NUL characters).",
    )

    def validate_status(self, value: list[str]) -> list[str]:
        allowed = self.context["allowed_statuses"]
        refused = [status for status in value if status not in allowed]
        if refused:
            raise serializers.ValidationError(
                f"This action applies only to {' or '.join(sorted(allowed))} jobs, "
                f"not {refused[0]!r}."
            )
        return value

    FILTER_FIELDS = ("status", "execute_at_from", "execute_at_to", "handler")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # (KnownFieldsOnly: a misspelt criterion ignored would widen the action to jobs the
        # caller excluded.)
        if not any(name in attrs for name in self.FILTER_FIELDS):
            raise serializers.ValidationError(
                "Give at least one of status, execute_at_from, execute_at_to, handler "
                "(a bulk action never applies to all jobs by accident)."
            )
        start, end = attrs.get("execute_at_from"), attrs.get("execute_at_to")
        if start is not None and end is not None and start >= end:
            raise serializers.ValidationError(
                {"execute_at_to": ["Must be later than execute_at_from."]}
            )
        return attrs

    def job_filter(self) -> JobFilter:
        data = self.validated_data
        return JobFilter(
            statuses=tuple(data.get("status") or sorted(self.context["allowed_statuses"])),
            execute_at_from=data.get("execute_at_from"),
            execute_at_to=data.get("execute_at_to"),
            handler=data.get("handler"),
        )


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer, and only that: DRF's IntegerField would take "5", 5.0 and true."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise serializers.ValidationError("Must be a whole number.")
        return super().to_internal_value(data)


def _extra_attempts() -> serializers.IntegerField:
    return StrictIntegerField(
        required=False,
        min_value=1,
        max_value=settings.JOB_MAX_ATTEMPTS_LIMIT,
        help_text="New attempts the job gets (default JOBSVC_JOB_DEFAULT_MAX_ATTEMPTS); "
        "its attempt count and history stay.",
    )


class JobRetryInput(KnownFieldsOnly):
    extra_attempts = _extra_attempts()

    def extra(self) -> int:
        return self.validated_data.get("extra_attempts", settings.JOB_DEFAULT_MAX_ATTEMPTS)


def _statuses(*statuses: str) -> serializers.ListField:
    """The status criterion of an action that applies to these statuses only."""
    return serializers.ListField(
        child=serializers.ChoiceField(choices=sorted(statuses)),
        required=False,
        min_length=1,
        help_text=f"Statuses to include, of {', '.join(sorted(statuses))} (default: all).",
    )


class JobsCancelInput(JobFilterInput):
    """Which of the caller's jobs to cancel: those not started yet that match."""

    status = _statuses(JobStatus.SCHEDULED, JobStatus.QUEUED)


class JobsRetryInput(JobFilterInput, JobRetryInput):
    """Which failed jobs to retry (a filter) and how many new attempts each gets."""

    status = _statuses(JobStatus.FAILED)


class JobsRedriveInput(JobsRetryInput):
    """Staff: which failed (dead-lettered) jobs of any user to retry."""

    user_id = StrictIntegerField(
        required=False, min_value=1, help_text="Only this user's jobs (default: every user's)."
    )

    FILTER_FIELDS = (*JobFilterInput.FILTER_FIELDS, "user_id")


class JobsRetriedOutput(serializers.Serializer):
    retried = serializers.IntegerField(help_text="How many failed jobs are scheduled again.")


class JobsCancelledOutput(serializers.Serializer):
    cancelled = serializers.IntegerField(help_text="How many jobs this request cancelled.")


def attempt_to_dict(attempt: JobAttempt | RunningAttempt) -> dict[str, Any]:
    return {
        "attempt": attempt.attempt,
        "outcome": attempt.outcome,
        "started_at": _iso(attempt.started_at),
        "finished_at": _iso(attempt.finished_at),
        "duration_seconds": attempt.duration_seconds,
        "error": attempt.error or None,
        "http_status": attempt.http_status,
        "response_excerpt": attempt.response_excerpt or None,
    }


ATTEMPT_OUTCOMES = [*AttemptOutcome.choices, ("running", "Running")]


class AttemptOutput(serializers.Serializer):
    attempt = serializers.IntegerField(help_text="1 for the first attempt.")
    outcome = serializers.ChoiceField(
        choices=ATTEMPT_OUTCOMES,
        help_text="succeeded; retried (failed, the job was scheduled again); failed (for "
        "good); timed_out (did not finish within timeout_seconds); lost (its executor "
        "stopped responding); running (the job's current attempt). A timed-out or lost "
        "attempt is retried while the job has attempts left.",
    )
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True, help_text="null while running.")
    duration_seconds = serializers.FloatField(allow_null=True, help_text="null while running.")
    error = serializers.CharField(allow_null=True, help_text="Why the attempt failed.")
    http_status = serializers.IntegerField(
        allow_null=True, help_text="The receiver's HTTP status (the http handler)."
    )
    response_excerpt = serializers.CharField(
        allow_null=True,
        help_text="The first bytes of the receiver's answer, as text (at most "
        "JOBSVC_ATTEMPT_RESPONSE_EXCERPT_BYTES, 1 KiB by default).",
    )
