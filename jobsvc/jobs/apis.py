"""HTTP endpoints for the caller's jobs (``/api/v1/me/jobs``). They only translate."""

from __future__ import annotations

import re

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers as drf_serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from jobsvc import errors
from jobsvc.api.envelope import ErrorOutput, enveloped, ok
from jobsvc.jobs.models import JobStatus
from jobsvc.jobs.schema import (
    CREATE_DESCRIPTION,
    IDEMPOTENCY_KEY_HEADER,
    JOB_ID_PATH,
    JOBS_LIST_PARAMETERS,
)
from jobsvc.jobs.selectors import JobFilter, job_get, jobs_list
from jobsvc.jobs.serializers import JobCreateInput, JobOutput, job_to_dict
from jobsvc.jobs.services import job_cancel, jobs_create
from jobsvc.jobs.specs import SpecErrors, parse_aware_datetime, parse_job_spec, parse_job_specs
from jobsvc.sharding.ids import is_job_id

_ERRORS = {code: OpenApiResponse(ErrorOutput) for code in (400, 401, 404, 409, 413, 415, 503)}
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
        parameters=[IDEMPOTENCY_KEY_HEADER],
        responses={
            201: enveloped("JobCreated", JobOutput()),
            200: OpenApiResponse(
                description="Replayed: the job(s) the first request with this Idempotency-Key made."
            ),
            **_ERRORS,
        },
    )
    def post(self, request: Request) -> Response:
        now = timezone.now()
        is_bulk = isinstance(request.data, list)
        try:
            if is_bulk:
                specs = parse_job_specs(request.data, now=now)
            else:
                specs = [parse_job_spec(request.data, now=now)]
        except SpecErrors as exc:
            raise ValidationError(exc.detail) from None
        result = jobs_create(
            user_id=request.user.pk,
            specs=specs,
            is_bulk=is_bulk,
            idempotency_key=_idempotency_key(request),
        )
        data = [job_to_dict(job) for job in result.jobs]
        if result.created:
            return ok(data if is_bulk else data[0], status=201)
        return ok(data if is_bulk else data[0], headers={"Idempotent-Replayed": "true"})


class JobDetailApi(APIView):
    @extend_schema(
        operation_id="jobs_get",
        parameters=[JOB_ID_PATH],
        responses={200: enveloped("Job", JobOutput()), **_ERRORS},
    )
    def get(self, request: Request, job_id: str) -> Response:
        return ok(job_to_dict(job_get(user_id=request.user.pk, job_id=job_id)))


class JobCancelApi(APIView):
    @extend_schema(
        operation_id="jobs_cancel",
        parameters=[JOB_ID_PATH],
        request=None,
        responses={200: enveloped("JobCancelled", JobOutput()), **_ERRORS},
    )
    def post(self, request: Request, job_id: str) -> Response:
        return ok(job_to_dict(job_cancel(user_id=request.user.pk, job_id=job_id)))


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


def _limit(raw: str | None) -> int:
    if raw is None:
        return settings.JOBS_PAGE_SIZE
    maximum = settings.JOBS_MAX_PAGE_SIZE
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= maximum:
        raise _param_error("limit", f"Must be a whole number from 1 to {maximum}.")
    return int(raw)


def _param_error(name: str, message: str) -> errors.InvalidInput:
    return errors.InvalidInput(f"{name}: {message}", fields={name: [message]})
