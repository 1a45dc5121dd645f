"""HTTP endpoints for the caller's jobs (``/api/v1/me/jobs``). They only translate."""

from __future__ import annotations

import functools
import re
from typing import Any

from django.conf import settings
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers as drf_serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from jobsvc import errors
from jobsvc.api.envelope import ErrorOutput, enveloped, ok
from jobsvc.jobs.changes import job_cancel, job_reschedule, job_retry, jobs_cancel, jobs_retry
from jobsvc.jobs.handler_specs import request_resolution_budget
from jobsvc.jobs.limits import jobs_admit, jobs_create_admit
from jobsvc.jobs.models import CANCELLABLE_STATUSES, JobStatus
from jobsvc.jobs.schema import (
    ATTEMPTS_PARAMETERS,
    CREATE_DESCRIPTION,
    CREATED_HEADERS,
    IDEMPOTENCY_KEY_HEADER,
    JOB_ID_PATH,
    JOBS_LIST_PARAMETERS,
    RESCHEDULE_REQUEST_SCHEMA,
)
from jobsvc.jobs.selectors import JobFilter, job_attempts, job_get, jobs_list
from jobsvc.jobs.serializers import (
    AttemptOutput,
    JobCreateInput,
    JobOutput,
    JobRetryInput,
    JobsCancelInput,
    JobsCancelledOutput,
    JobsRedriveInput,
    JobsRetriedOutput,
    JobsRetryInput,
    attempt_to_dict,
    job_to_dict,
)
from jobsvc.jobs.services import jobs_create
from jobsvc.jobs.specs import (
    SpecErrors,
    parse_aware_datetime,
    parse_job_spec,
    parse_job_specs,
    parse_reschedule,
)
from jobsvc.sharding.ids import is_job_id

_ERRORS = {code: OpenApiResponse(ErrorOutput) for code in (400, 401, 404, 409, 413, 415, 503)}
_LIMITED = {
    429: OpenApiResponse(
        ErrorOutput,
        description="A per-user limit (create rate, unfinished jobs, or the bytes they "
        "hold) refused the request; Retry-After says when to try again, and the RateLimit "
        "and RateLimit-Policy fields give the state of each limit.",
    )
}
_IDEMPOTENCY_KEY = re.compile(rf"[\x21-\x7e]{{1,{settings.MAX_IDEMPOTENCY_KEY_LENGTH}}}")
_STATUSES = frozenset(JobStatus.values)


class JobListCreateApi(APIView):
    @extend_schema(
        operation_id="jobs_list",
        parameters=JOBS_LIST_PARAMETERS,
        responses={
            200: enveloped(
                "JobPage",
                JobOutput(many=True),
                pagination=drf_serializers.DictField(help_text='{"next_cursor": str | null}'),
            ),
            **_ERRORS,
        },
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        page = jobs_list(
            user_id=request.user.pk,
            job_filter=JobFilter(
                statuses=_statuses(params.get("status")),
                execute_at_from=_time_param(params, "execute_at_from"),
                execute_at_to=_time_param(params, "execute_at_to"),
            ),
            before_id=_cursor(params.get("cursor")),
            limit=_limit(params.get("limit")),
        )
        return ok(
            [job_to_dict(job) for job in page.jobs], pagination={"next_cursor": page.next_cursor}
        )

    @extend_schema(
        operation_id="jobs_create",
        description=CREATE_DESCRIPTION,
        request=JobCreateInput,
        parameters=[IDEMPOTENCY_KEY_HEADER, *CREATED_HEADERS],
        responses={
            201: enveloped("JobCreated", JobOutput()),
            **_ERRORS,
            422: OpenApiResponse(
                ErrorOutput,
                description="This Idempotency-Key was first used with a different request body.",
            ),
            **_LIMITED,
        },
    )
    def post(self, request: Request) -> Response:
        now = timezone.now()
        is_bulk = isinstance(request.data, list)
        try:
            with request_resolution_budget():
                if is_bulk:
                    specs = parse_job_specs(request.data, now=now, user_id=request.user.pk)
                else:
                    specs = [parse_job_spec(request.data, now=now, user_id=request.user.pk)]
        except SpecErrors as exc:
            raise ValidationError(exc.detail) from None
        jobs_create_admit(user=request.user, specs=specs)
        result = jobs_create(
            user_id=request.user.pk,
            specs=specs,
            is_bulk=is_bulk,
            idempotency_key=_idempotency_key(request),
        )
        data = [job_to_dict(job) for job in result.jobs]
        # A replay answers as the first request did (201), and says it is one.
        headers = {} if result.created else {"Idempotent-Replayed": "true"}
        if is_bulk:
            return ok(data, status=201, headers=headers)
        headers["Location"] = reverse("job-detail", kwargs={"job_id": data[0]["id"]})
        return ok(data[0], status=201, headers=headers)


class JobDetailApi(APIView):
    @extend_schema(
        operation_id="jobs_get",
        parameters=[JOB_ID_PATH],
        responses={200: enveloped("Job", JobOutput()), **_ERRORS},
    )
    def get(self, request: Request, job_id: str) -> Response:
        return ok(job_to_dict(job_get(user_id=request.user.pk, job_id=job_id)))


class JobAttemptsApi(APIView):
    @extend_schema(
        operation_id="jobs_attempts",
        parameters=ATTEMPTS_PARAMETERS,
        responses={
            200: enveloped(
                "AttemptPage",
                AttemptOutput(many=True),
                pagination=drf_serializers.DictField(help_text='{"next_cursor": str | null}'),
            ),
            **_ERRORS,
        },
        description="The job's attempts, newest first: when each started and finished, how "
        "it ended, its error, and what the receiver answered. Kept as long as the job.",
    )
    def get(self, request: Request, job_id: str) -> Response:
        params = request.query_params
        page = job_attempts(
            user_id=request.user.pk,
            job_id=job_id,
            before_attempt=_attempt_cursor(params.get("cursor")),
            limit=_limit(params.get("limit")),
        )
        return ok(
            [attempt_to_dict(attempt) for attempt in page.attempts],
            pagination={"next_cursor": page.next_cursor},
        )


class JobCancelApi(APIView):
    @extend_schema(
        operation_id="jobs_cancel",
        parameters=[JOB_ID_PATH],
        request=None,
        responses={200: enveloped("JobCancelled", JobOutput()), **_ERRORS},
    )
    def post(self, request: Request, job_id: str) -> Response:
        return ok(job_to_dict(job_cancel(user_id=request.user.pk, job_id=job_id)))


class JobRescheduleApi(APIView):
    @extend_schema(
        operation_id="jobs_reschedule",
        parameters=[JOB_ID_PATH],
        request={"application/json": RESCHEDULE_REQUEST_SCHEMA},
        responses={200: enveloped("JobRescheduled", JobOutput()), **_ERRORS, **_LIMITED},
        description="Move a job that has not been dispatched (scheduled, no attempt yet) to a "
        "new time, and/or change its message. 409 once it is queued (jobs are queued up to "
        "JOBSVC_SCHEDULER_DISPATCH_AHEAD_SECONDS, 1 s by default, before their time), running "
        "or finished. "
        "Give at least one field, and at most one of execute_at and delay_seconds; "
        "execute_at must be within JOBSVC_MAX_SCHEDULE_HORIZON_DAYS of now (400 otherwise). "
        "Counts as one job against the create rate, and a longer message's extra bytes "
        "against the stored-bytes limit (429).",
    )
    def post(self, request: Request, job_id: str) -> Response:
        try:
            change = parse_reschedule(request.data, now=timezone.now())
        except SpecErrors as exc:
            raise ValidationError(exc.detail) from None
        job = job_reschedule(
            user_id=request.user.pk, job_id=job_id, change=change, admit=_admit(request)
        )
        return ok(job_to_dict(job))


class JobsCancelApi(APIView):
    @extend_schema(
        operation_id="jobs_cancel_many",
        request=JobsCancelInput,
        responses={200: enveloped("JobsCancelled", JobsCancelledOutput()), **_ERRORS},
        description="Cancel every job of the caller that matches the filter and has not "
        "started (scheduled or queued), on every shard; answers how many were cancelled. "
        "Give at least one criterion; a field the filter does not know is a 400. A rule "
        "the schema cannot state: execute_at_to must be later than execute_at_from (400).",
    )
    def post(self, request: Request) -> Response:
        job_filter = _job_filter(request, allowed_statuses=CANCELLABLE_STATUSES)
        return ok({"cancelled": jobs_cancel(user_id=request.user.pk, job_filter=job_filter)})


_FAILED = frozenset({JobStatus.FAILED.value})
_ERRORS_AND_FORBIDDEN = {**_ERRORS, 403: OpenApiResponse(ErrorOutput)}


class JobRetryApi(APIView):
    @extend_schema(
        operation_id="jobs_retry",
        parameters=[JOB_ID_PATH],
        request=JobRetryInput,
        responses={200: enveloped("JobRetried", JobOutput()), **_ERRORS, **_LIMITED},
        description="Give a failed job new attempts: it is scheduled again, due now, with "
        "its id, attempt count and attempt history kept. 409 unless the job failed. The "
        "job counts against the per-user limits as a new one would (429).",
    )
    def post(self, request: Request, job_id: str) -> Response:
        serializer = _valid(JobRetryInput, request)
        job = job_retry(
            user_id=request.user.pk,
            job_id=job_id,
            extra_attempts=serializer.extra(),
            admit=_admit(request),
        )
        return ok(job_to_dict(job))


class JobsRetryApi(APIView):
    @extend_schema(
        operation_id="jobs_retry_many",
        request=JobsRetryInput,
        responses={200: enveloped("JobsRetried", JobsRetriedOutput()), **_ERRORS, **_LIMITED},
        description="Retry every failed job of the caller that matches the filter, on every "
        "shard; answers how many are scheduled again. Give at least one criterion; a field "
        "the filter does not know is a 400. A rule the schema cannot state: execute_at_to "
        "must be later than execute_at_from (400). The matching jobs count against the "
        "per-user limits as that many new ones would, all or none (429); more than the "
        "create-rate burst at once "
        "(JOBSVC_USER_CREATE_RATE_PER_SECOND x JOBSVC_USER_CREATE_BURST_SECONDS) is a 400: "
        "narrow the filter.",
    )
    def post(self, request: Request) -> Response:
        serializer = _valid(JobsRetryInput, request, allowed_statuses=_FAILED)
        retried = jobs_retry(
            user_id=request.user.pk,
            job_filter=serializer.job_filter(),
            extra_attempts=serializer.extra(),
            admit=_admit(request),
        )
        return ok({"retried": retried})


class JobsRedriveApi(APIView):
    @extend_schema(
        operation_id="jobs_redrive",
        request=JobsRedriveInput,
        responses={200: enveloped("JobsRedriven", JobsRetriedOutput()), **_ERRORS_AND_FORBIDDEN},
        description="Staff only: retry the failed (dead-lettered) jobs of every user, or of "
        "user_id, that match the filter; answers how many are scheduled again. The per-user "
        "limits do not apply. A rule the schema cannot state: execute_at_to must be later "
        "than execute_at_from (400).",
    )
    def post(self, request: Request) -> Response:
        if not request.user.is_staff:
            raise errors.StaffOnly("Redriving every user's failed jobs needs a staff token.")
        serializer = _valid(JobsRedriveInput, request, allowed_statuses=_FAILED)
        retried = jobs_retry(
            user_id=serializer.validated_data.get("user_id"),
            job_filter=serializer.job_filter(),
            extra_attempts=serializer.extra(),
        )
        return ok({"retried": retried})


def _admit(request: Request):
    """The caller's limits, for a service to count what it schedules against."""
    return functools.partial(jobs_admit, user=request.user)


def _job_filter(request: Request, *, allowed_statuses: frozenset[str]) -> JobFilter:
    return _valid(JobsCancelInput, request, allowed_statuses=allowed_statuses).job_filter()


def _valid(serializer_class, request: Request, **context: Any):
    """The request body validated by ``serializer_class``; a 400 if it is not valid."""
    data = request.data if request.data is not None else {}
    serializer = serializer_class(data=data, context=context)
    serializer.is_valid(raise_exception=True)
    return serializer


def _idempotency_key(request: Request) -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if not _IDEMPOTENCY_KEY.fullmatch(key):
        raise errors.InvalidInput(
            f"Idempotency-Key must be 1 to {settings.MAX_IDEMPOTENCY_KEY_LENGTH} printable "
            "ASCII characters without spaces."
        )
    return key


def _statuses(raw: str | None) -> tuple[str, ...]:
    if not raw:
        return ()
    statuses = tuple(part.strip() for part in raw.split(",") if part.strip())
    unknown = [status for status in statuses if status not in _STATUSES]
    if unknown:
        raise _param_error("status", f"Unknown status {unknown[0]!r}; one of {sorted(_STATUSES)}.")
    return statuses


def _time_param(params, name: str):
    raw = params.get(name)
    if raw is None:
        return None
    parsed = parse_aware_datetime(raw)
    if isinstance(parsed, str):
        raise _param_error(name, parsed)
    return parsed


def _cursor(raw: str | None) -> str | None:
    if raw is None:
        return None
    if not is_job_id(raw):
        raise _param_error("cursor", "Not a cursor this API returned (next_cursor).")
    return raw


_ATTEMPT_CURSOR = re.compile(r"[1-9][0-9]{0,4}")  # an attempt number (jobs allow 32,767)


def _attempt_cursor(raw: str | None) -> int | None:
    if raw is None:
        return None
    if not _ATTEMPT_CURSOR.fullmatch(raw):
        raise _param_error("cursor", "Not a cursor this API returned (next_cursor).")
    return int(raw)


def _limit(raw: str | None) -> int:
    if raw is None:
        return settings.JOBS_PAGE_SIZE
    maximum = settings.JOBS_MAX_PAGE_SIZE
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= maximum:
        raise _param_error("limit", f"Must be a whole number from 1 to {maximum}.")
    return int(raw)


def _param_error(name: str, message: str) -> errors.InvalidInput:
    return errors.InvalidInput(f"{name}: {message}", fields={name: [message]})
