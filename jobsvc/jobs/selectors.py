"""Reads of jobs. A job is found through the shard its id names; lists merge every shard."""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from datetime import datetime
from itertools import islice

from django.db.models import BigIntegerField, Count, F, Func, QuerySet, Sum
from django.db.models.functions import Coalesce

from jobsvc import errors
from jobsvc.jobs.models import AttemptOutcome, Job, JobAttempt, JobStatus
from jobsvc.jobs.store import jobs_by_ids
from jobsvc.sharding.ids import InvalidJobId, shard_of
from jobsvc.sharding.shards import UnknownShard, shard_alias, shard_aliases


def job_get(*, user_id: int, job_id: str) -> Job:
    """The caller's job; another user's job is reported exactly like a missing one."""
    try:
        alias = shard_alias(shard_of(job_id))
    except InvalidJobId as exc:
        raise errors.InvalidInput(f"Malformed job id: {exc}.") from None
    except UnknownShard:
        raise errors.JobNotFound(f"No job {job_id}.") from None
    job = Job.objects.using(alias).filter(pk=job_id, user_id=user_id).first()
    if job is None:
        raise errors.JobNotFound(f"No job {job_id}.")
    return job


@dataclass(frozen=True)
class JobFilter:
    statuses: tuple[str, ...] = ()
    execute_at_from: datetime | None = None  # inclusive
    execute_at_to: datetime | None = None  # exclusive
    handler: str | None = None


def jobs_matching(*, alias: str, user_id: int | None, job_filter: JobFilter) -> QuerySet[Job]:
    """The user's jobs (every user's with None: staff only) on one shard that pass the filter."""
    query = Job.objects.using(alias).all()
    if user_id is not None:
        query = query.filter(user_id=user_id)
    if job_filter.statuses:
        query = query.filter(status__in=job_filter.statuses)
    if job_filter.execute_at_from is not None:
        query = query.filter(execute_at__gte=job_filter.execute_at_from)
    if job_filter.execute_at_to is not None:
        query = query.filter(execute_at__lt=job_filter.execute_at_to)
    if job_filter.handler is not None:
        query = query.filter(handler=job_filter.handler)
    return query


@dataclass(frozen=True)
class JobPage:
    jobs: list[Job]
    next_cursor: str | None


def jobs_list(*, user_id: int, job_filter: JobFilter, before_id: str | None, limit: int) -> JobPage:
    """The caller's jobs newest first (by id), ``limit`` per page, across all shards.

    Each shard returns the ids of at most ``limit + 1`` jobs through the (user_id, id)
    index; the merge keeps the newest ``limit`` and says whether more remain; only those
    jobs are then read whole, from the shards holding them. A page costs memory for its
    own rows (at most ``limit`` times the largest row), not for every shard's candidates.
    """
    per_shard = [
        _shard_page_ids(alias, user_id, job_filter, before_id, limit + 1)
        for alias in shard_aliases()
    ]
    merged = list(islice(heapq.merge(*per_shard, reverse=True), limit + 1))
    has_more = len(merged) > limit
    page_ids = merged[:limit]
    return JobPage(
        jobs=jobs_by_ids(page_ids), next_cursor=page_ids[-1] if has_more and page_ids else None
    )


def _shard_page_ids(
    alias: str, user_id: int, job_filter: JobFilter, before_id: str | None, limit: int
) -> list[str]:
    query = jobs_matching(alias=alias, user_id=user_id, job_filter=job_filter)
    if before_id is not None:
        query = query.filter(id__lt=before_id)
    return list(query.order_by("-id").values_list("id", flat=True)[:limit])


def jobs_usage(query: QuerySet[Job]) -> tuple[int, int]:
    """How many jobs ``query`` holds on its shard, and their bytes (message and parameters,
    as stored), which the per-user limits count (``jobsvc.jobs.limits``)."""
    size = Func(F("message"), function="octet_length", output_field=BigIntegerField()) + Func(
        F("handler_params"), function="pg_column_size", output_field=BigIntegerField()
    )
    totals = query.aggregate(jobs=Count("pk"), size=Coalesce(Sum(size), 0))
    return totals["jobs"], int(totals["size"])


@dataclass(frozen=True)
class RunningAttempt:
    """The attempt a running job is on: started, not finished (it has no history row yet)."""

    job_id: str
    attempt: int
    started_at: datetime | None
    outcome: str = "running"
    finished_at: None = None
    error: None = None
    http_status: None = None
    response_excerpt: None = None
    duration_seconds: None = None


@dataclass(frozen=True)
class AttemptPage:
    attempts: list[JobAttempt | RunningAttempt]
    next_cursor: str | None


def job_attempts(
    *, user_id: int, job_id: str, before_attempt: int | None, limit: int
) -> AttemptPage:
    """The caller's job's attempts, newest first, ``limit`` per page (NotFound for another
    user's job), from its history rows and, for the current attempt if it has none, from
    the job's row (``_current_attempt_unrecorded``)."""
    job = job_get(user_id=user_id, job_id=job_id)
    query = JobAttempt.objects.using(job._state.db).filter(job_id=job.id)
    if before_attempt is not None:
        query = query.filter(attempt__lt=before_attempt)
    rows = list(query.order_by("-attempt")[: limit + 1])
    current = _current_attempt_unrecorded(job, rows, before_attempt)
    attempts: list[JobAttempt | RunningAttempt] = ([current] if current else []) + rows
    has_more = len(attempts) > limit
    attempts = attempts[:limit]
    return AttemptPage(attempts, str(attempts[-1].attempt) if has_more and attempts else None)


def _current_attempt_unrecorded(
    job: Job, rows: list[JobAttempt], before_attempt: int | None
) -> JobAttempt | RunningAttempt | None:
    """The job's current attempt when it is on this page and has no history row: a running
    one (``RunningAttempt``), or one its executor ran inline and found succeeded. The
    executor writes no row for those: the job's row holds all there is (start and end at
    one instant), and not writing it keeps that row's cost off the drain of no-op jobs."""
    if not job.attempts or (before_attempt is not None and job.attempts >= before_attempt):
        return None
    if rows and rows[0].attempt == job.attempts:
        return None
    if job.status == JobStatus.RUNNING:
        return RunningAttempt(job.id, job.attempts, job.started_at)
    if job.status == JobStatus.SUCCEEDED and job.started_at and job.finished_at:
        return JobAttempt(
            job_id=job.id,
            attempt=job.attempts,
            started_at=job.started_at,
            finished_at=job.finished_at,
            outcome=AttemptOutcome.SUCCEEDED,
            error="",
            http_status=None,
            response_excerpt="",
        )
    return None
