"""Response shapes of jobs, and the request shapes as the OpenAPI schema documents them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from rest_framework import serializers

from jobsvc.jobs.models import Job, JobStatus
from jobsvc.jobs.store import JobRow


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
        "handler_params": job.handler_params,
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
        validators=[RegexValidator(r"^[^\x00]*$")],
        help_text="The job's payload: at most 64 KiB of UTF-8, no NUL characters.",
    )
    execute_at = serializers.DateTimeField(
        help_text="When the job is due: ISO 8601 with a time zone (Z or an offset), "
        "within 365 days of now."
    )
    handler = serializers.ChoiceField(
        choices=sorted(settings.JOB_HANDLERS),
        required=False,
        allow_null=True,
        help_text='What runs the job: "default" (records it), "http", "kafka".',
    )
    handler_params = serializers.DictField(
        required=False, allow_null=True, help_text='http: {"url": ...}; kafka: {"topic": ...}.'
    )
    max_attempts = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=settings.JOB_MAX_ATTEMPTS_LIMIT,
        help_text="Attempts before failing.",
    )
    timeout_seconds = serializers.FloatField(
        required=False,
        allow_null=True,
        min_value=0.001,
        max_value=settings.JOB_TIMEOUT_LIMIT_SECONDS,
        help_text="Per-attempt timeout.",
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
