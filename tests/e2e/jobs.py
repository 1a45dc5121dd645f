"""Creating jobs and reading them back in end-to-end tests (through the service layer)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from jobsvc.jobs.models import Job
from jobsvc.jobs.services import jobs_create
from jobsvc.jobs.specs import JobSpec
from jobsvc.sharding.shards import shard_aliases


def spec(
    *,
    due: datetime | None = None,
    message: str = "hello",
    handler: str = "default",
    params: dict | None = None,
    max_attempts: int | None = None,
    timeout_seconds: float | None = None,
) -> JobSpec:
    return JobSpec(
        message=message,
        execute_at=due or timezone.now(),
        max_attempts=max_attempts or settings.JOB_DEFAULT_MAX_ATTEMPTS,
        timeout_seconds=timeout_seconds or settings.JOB_DEFAULT_TIMEOUT_SECONDS,
        handler=handler,
        handler_params=params or {},
    )


def create(user_id: int, specs: list[JobSpec]) -> list[str]:
    """Create jobs in bulks of up to 1,000 (each bulk lands on one random shard)."""
    ids: list[str] = []
    for start in range(0, len(specs), 1000):
        chunk = specs[start : start + 1000]
        result = jobs_create(user_id=user_id, specs=chunk, is_bulk=len(chunk) > 1)
        ids.extend(job.id for job in result.jobs)
    return ids


def all_jobs(**filters) -> list[Job]:
    return [job for alias in shard_aliases() for job in Job.objects.using(alias).filter(**filters)]


def status_counts() -> Counter:
    return Counter(job.status for job in all_jobs())


def due_in(seconds: float) -> datetime:
    return timezone.now() + timedelta(seconds=seconds)
