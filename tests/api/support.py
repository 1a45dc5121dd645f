"""Helpers shared by the API tests: URLs, request bodies, and direct reads of the shards."""

from __future__ import annotations

import itertools
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from jobsvc.jobs.models import Job
from jobsvc.jobs.services import jobs_create
from jobsvc.jobs.specs import parse_job_spec
from jobsvc.sharding.ids import new_job_id, shard_of
from jobsvc.sharding.shards import shard_alias, shard_aliases, shard_for_idempotency_key

USERS_URL = "/api/v1/users"
LOGIN_URL = "/api/v1/auth/login"
REFRESH_URL = "/api/v1/auth/refresh"
JOBS_URL = "/api/v1/me/jobs"
BULK_CANCEL_URL = f"{JOBS_URL}/cancel"
RETRY_MANY_URL = f"{JOBS_URL}/retry"
REDRIVE_URL = "/api/v1/jobs/redrive"
JOB_CONTRACT_FIELDS = {"id", "user_id", "message", "status", "execute_at", "shard_id"}


def job_url(job_id: str) -> str:
    return f"{JOBS_URL}/{job_id}"


def cancel_url(job_id: str) -> str:
    return f"{JOBS_URL}/{job_id}/cancel"


def reschedule_url(job_id: str) -> str:
    return f"{JOBS_URL}/{job_id}/reschedule"


def retry_url(job_id: str) -> str:
    return f"{JOBS_URL}/{job_id}/retry"


def job_body(message: str = "hello", **due_in: float) -> dict[str, str]:
    """A valid create body, due ``due_in`` (timedelta keywords) from now; one hour by default."""
    due = timezone.now() + timedelta(**(due_in or {"hours": 1}))
    return {"message": message, "execute_at": due.isoformat()}


def post_jobs(client, body: Any, *, key: str | None = None):
    headers = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    return client.post(JOBS_URL, body, format="json", **headers)


def create_job(client, body: dict | None = None, *, key: str | None = None) -> dict[str, Any]:
    response = post_jobs(client, body or job_body(), key=key)
    assert response.status_code == 201, response.json()
    return response.json()["data"]


def create_jobs(client, bodies: list[dict], *, key: str | None = None) -> list[dict[str, Any]]:
    response = post_jobs(client, bodies, key=key)
    assert response.status_code == 201, response.json()
    return response.json()["data"]


def stored_job(job_id: str) -> Job:
    return Job.objects.using(shard_alias(shard_of(job_id))).get(pk=job_id)


def insert_job(
    *,
    user_id: int,
    shard_id: int,
    created_at: datetime | None = None,
    execute_at: datetime | None = None,
    status: str = "scheduled",
) -> Job:
    """A job made by the service on ``shard_id``, then given an id of another second.

    Made through ``jobs_create`` so it has every column a real job has; the id (and so
    ``created_at``) is rewritten afterwards, e.g. to an earlier second for ordering tests.
    """
    now = timezone.now()
    created_at = created_at or now
    due = execute_at or now + timedelta(hours=1)
    spec = parse_job_spec(
        {"message": f"stored at {created_at.isoformat()}", "execute_at": due.isoformat()}, now=now
    )
    key = key_for_shard(user_id=user_id, shard_id=shard_id, prefix=f"insert-{uuid.uuid4().hex}")
    (made,) = jobs_create(user_id=user_id, specs=[spec], is_bulk=False, idempotency_key=key).jobs
    job_id = new_job_id(shard_id=shard_id, at=created_at)
    Job.objects.using(shard_alias(shard_id)).filter(pk=made.id).update(
        id=job_id, created_at=created_at, updated_at=created_at, status=status
    )
    return stored_job(job_id)


def set_status(job_id: str, status: str) -> None:
    Job.objects.using(shard_alias(shard_of(job_id))).filter(pk=job_id).update(status=status)


def jobs_of(user_id: int) -> list[Job]:
    """Every job of a user, read straight from every shard."""
    return [
        job for alias in shard_aliases() for job in Job.objects.using(alias).filter(user_id=user_id)
    ]


def job_count(user_id: int) -> int:
    """A user's jobs on all shards (the databases may hold other users' jobs too)."""
    return sum(
        Job.objects.using(alias).filter(user_id=user_id).count() for alias in shard_aliases()
    )


def key_for_shard(*, user_id: int, shard_id: int, prefix: str = "key") -> str:
    """An Idempotency-Key whose requests (for this user) land on ``shard_id``."""
    for n in itertools.count():
        key = f"{prefix}-{n}"
        if shard_for_idempotency_key(user_id=user_id, key=key) == shard_id:
            return key
    raise AssertionError("unreachable")


def error_of(response, status: int, code: str | None = None) -> dict[str, Any]:
    """Assert the response is an error in the envelope; return its ``error`` object."""
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["success"] is False
    assert set(body["error"]) == {"code", "message", "fields"}
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code, body
    return body["error"]
