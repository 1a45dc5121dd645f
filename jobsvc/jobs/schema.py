"""OpenAPI declarations of the jobs endpoints: what the API enforces, stated exactly.

A client generated from the schema sends only requests the API accepts. Rules that a
schema cannot state (a time relative to now, password validators, a handler's
parameters checked against deployment settings) are written in the operation's
description instead.
"""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter

from jobsvc.jobs.models import JobStatus

# A KSUID in base62: 27 characters. The first is at most "Z" so that every id the pattern
# admits is in range (the largest KSUID starts "aWgEPTl1"); ids made before the year
# 2100 start with a digit or a capital letter.
JOB_ID_SCHEMA = {
    "type": "string",
    "pattern": "^[0-9A-Z][0-9A-Za-z]{26}$",
    "minLength": 27,
    "maxLength": 27,
    "example": "3MRHRgJurRLZ2t5putDC3CqGlPu",
}
_STATUS = "(" + "|".join(JobStatus.values) + ")"

JOB_ID_PATH = OpenApiParameter(
    "job_id", JOB_ID_SCHEMA, OpenApiParameter.PATH, description="The job's id (a KSUID)."
)
IDEMPOTENCY_KEY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    {
        "type": "string",
        "pattern": f"^[\\x21-\\x7e]{{1,{settings.MAX_IDEMPOTENCY_KEY_LENGTH}}}$",
        "minLength": 1,
        "maxLength": settings.MAX_IDEMPOTENCY_KEY_LENGTH,
    },
    OpenApiParameter.HEADER,
    description=(
        "Printable ASCII without spaces. A retry with the same key and body returns the "
        "first result as it was first answered (201, with Idempotent-Replayed: true); the "
        "same key with another body is 422. Keys are remembered for "
        "JOBSVC_IDEMPOTENCY_KEY_TTL_HOURS."
    ),
)
# Response headers of a create (201).
CREATED_HEADERS = [
    OpenApiParameter(
        "Location",
        {"type": "string", "example": "/api/v1/me/jobs/3MRHRgJurRLZ2t5putDC3CqGlPu"},
        OpenApiParameter.HEADER,
        response=[201],
        description="The created job's URL (a single job's create; a bulk create has none).",
    ),
    OpenApiParameter(
        "Idempotent-Replayed",
        {"type": "string", "enum": ["true"]},
        OpenApiParameter.HEADER,
        response=[201],
        description="Present on a replay: the job(s) the first request with this "
        "Idempotency-Key made, answered as that request was.",
    ),
]
JOBS_LIST_PARAMETERS = [
    OpenApiParameter(
        "status",
        {"type": "string", "pattern": f"^\\s*{_STATUS}?\\s*(,\\s*{_STATUS}?\\s*)*$"},
        description="Comma-separated statuses to include (empty: all).",
    ),
    OpenApiParameter(
        "execute_at_from",
        {"type": "string", "format": "date-time"},
        description="Inclusive; ISO 8601 with a time zone.",
    ),
    OpenApiParameter(
        "execute_at_to",
        {"type": "string", "format": "date-time"},
        description="Exclusive; ISO 8601 with a time zone.",
    ),
    OpenApiParameter("cursor", JOB_ID_SCHEMA, description="next_cursor of the previous page."),
    OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": settings.JOBS_MAX_PAGE_SIZE},
        description=f"Jobs per page (default {settings.JOBS_PAGE_SIZE}).",
    ),
]

CREATE_DESCRIPTION = (
    "Schedule one job, or POST a JSON list of 1 to JOBSVC_MAX_BULK_JOBS of them to create "
    "all or none. Rules the schema cannot state: `execute_at` must lie within "
    "JOBSVC_MAX_SCHEDULE_HORIZON_DAYS (365) of the time of the request, either side; "
    "`message` is at most JOBSVC_MAX_MESSAGE_BYTES of UTF-8 (64 KiB; `maxLength` counts "
    'characters); `handler_params` depend on the handler: `http` needs `{"url": ...}` on a '
    'host the deployment allows, `kafka` needs `{"topic": ...}` among the allowed topics; '
    "`default` takes none."
)

# A reschedule changes at least one thing, and names at most one of execute_at and
# delay_seconds (rules a schema can state, which a serializer cannot).
RESCHEDULE_REQUEST_SCHEMA = {
    "type": "object",
    "minProperties": 1,
    "additionalProperties": False,
    "not": {"required": ["execute_at", "delay_seconds"]},
    "properties": {
        "execute_at": {
            "type": "string",
            "format": "date-time",
            "description": "The new due time: ISO 8601 with a time zone.",
        },
        "delay_seconds": {
            "type": "number",
            "minimum": 0,
            "maximum": settings.MAX_SCHEDULE_HORIZON.total_seconds(),
            "description": "Due this many seconds from now instead.",
        },
        "message": {
            "type": "string",
            "maxLength": settings.MAX_MESSAGE_BYTES,
            "description": "The new message.",
        },
    },
}


def _any_of(names: tuple[str, ...]) -> dict:
    return {"anyOf": [{"required": [name]} for name in names]}


# Rules of request bodies that JSON Schema states but DRF serializers cannot, added to
# their components once the schema is generated (jobsvc.api.schema_view.add_rules): a
# create names exactly one of execute_at and delay_seconds; a bulk action's filter names
# at least one criterion; no body takes a field it does not declare (a misspelt one is
# refused, never ignored). ``jobsvc.jobs.specs`` and the serializers enforce the same.
_FILTER_CRITERIA = ("status", "execute_at_from", "execute_at_to", "handler")
_CLOSED = {"additionalProperties": False}
COMPONENT_RULES: dict[str, dict] = {
    "JobCreateInput": {
        **_CLOSED,
        "oneOf": [{"required": ["execute_at"]}, {"required": ["delay_seconds"]}],
    },
    "JobRetryInput": _CLOSED,
    "JobsCancelInput": {**_CLOSED, **_any_of(_FILTER_CRITERIA)},
    "JobsRetryInput": {**_CLOSED, **_any_of(_FILTER_CRITERIA)},
    "JobsRedriveInput": {**_CLOSED, **_any_of((*_FILTER_CRITERIA, "user_id"))},
}
# Operations whose body may not be left out: a filter needs a criterion, a reschedule a
# change.
BODY_REQUIRED_OPERATIONS = frozenset(
    {"jobs_cancel_many", "jobs_retry_many", "jobs_redrive", "jobs_reschedule"}
)


ATTEMPTS_PARAMETERS = [
    JOB_ID_PATH,
    OpenApiParameter(
        "cursor",
        {"type": "string", "pattern": "^[1-9][0-9]{0,4}$"},
        description="next_cursor of the previous page.",
    ),
    OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": settings.JOBS_MAX_PAGE_SIZE},
        description=f"Attempts per page (default {settings.JOBS_PAGE_SIZE}).",
    ),
]
