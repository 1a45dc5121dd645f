"""Changes users make to jobs that exist: cancel, reschedule, retry (and the staff redrive).

Each decides against the workers with one conditional UPDATE: the row's status when the
statement runs says whether the change applies, so a job a scheduler or an executor moves
on meanwhile is left alone and the caller is told why.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol

from django.db.models import F, QuerySet
from django.utils import timezone

from jobsvc import errors
from jobsvc.jobs import store
from jobsvc.jobs.limits import stored_bytes_of
from jobsvc.jobs.models import CANCELLABLE_STATUSES, Job, JobStatus
from jobsvc.jobs.selectors import JobFilter, job_get, jobs_matching, jobs_usage
from jobsvc.jobs.specs import RescheduleSpec
from jobsvc.sharding.shards import shard_aliases

BULK_BATCH_SIZE = 5_000  # jobs changed per statement by a bulk cancel or retry


def _cancel_where(query: QuerySet[Job]) -> int:
    """Cancel the jobs of ``query`` that have not started; return how many.

    The one statement every cancel runs: the status condition is checked by the UPDATE
    itself, so a job an executor claims meanwhile (queued -> running) is left alone, and
    a job cancelled after it was published is dropped at claim time.
    """
    now = timezone.now()
    return query.filter(status__in=CANCELLABLE_STATUSES).update(
        status=JobStatus.CANCELLED, updated_at=now, finished_at=now
    )


def job_cancel(*, user_id: int, job_id: str) -> Job:
    """Cancel a job that has not started. Cancelling a cancelled job changes nothing."""
    job = job_get(user_id=user_id, job_id=job_id)
    updated = _cancel_where(Job.objects.using(job._state.db).filter(pk=job.pk, user_id=user_id))
    if updated:
        return job_get(user_id=user_id, job_id=job_id)
    job = job_get(user_id=user_id, job_id=job_id)  # it moved on since we read it
    if job.status == JobStatus.CANCELLED:
        return job
    raise errors.JobNotCancellable(f"Job {job_id} is {job.status}; it can no longer be cancelled.")


def jobs_cancel(*, user_id: int, job_filter: JobFilter) -> int:
    """Cancel every job of the user that passes the filter and has not started.

    Shard by shard, in batches of BULK_BATCH_SIZE, each batch its own statement (a user
    with a million jobs holds no long transaction). Not atomic across batches: if it
    stops midway, what it cancelled stays cancelled and a repeat cancels the rest.
    """
    return sum(
        _in_batches(
            jobs_matching(alias=alias, user_id=user_id, job_filter=job_filter).filter(
                status__in=CANCELLABLE_STATUSES
            ),
            _cancel_where,
        )
        for alias in shard_aliases()
    )


def _in_batches(query: QuerySet[Job], change: Callable[[QuerySet[Job]], int]) -> int:
    """Apply ``change`` to ``query``'s rows a batch at a time until none is left."""
    total = 0
    while True:
        batch = list(query.values_list("pk", flat=True)[:BULK_BATCH_SIZE])
        if not batch:
            return total
        total += change(query.filter(pk__in=batch))
        if len(batch) < BULK_BATCH_SIZE:
            return total


class Admit(Protocol):
    """Admits work against the caller's limits, or raises TooManyRequests
    (``jobsvc.jobs.limits.jobs_admit`` with the user bound)."""

    def __call__(
        self, *, jobs: int, stored_bytes: int = 0, rate_units: int | None = None
    ) -> None: ...


def job_reschedule(
    *, user_id: int, job_id: str, change: RescheduleSpec, admit: Admit | None = None
) -> Job:
    """Move a job that has not been dispatched to a new time and/or give it a new message.

    One conditional UPDATE (status scheduled, no attempt yet) decides against a scheduler
    dispatching the job at the same moment: the scheduler's claim updates the row it
    picked by ctid, and an updated row has a new ctid, so whichever commits first wins
    and the other changes nothing. The job runs at the new time, or, already dispatched,
    keeps its old one and the reschedule answers 409: never both, never neither.
    A queued job (dispatched, not yet started) is refused too: its message is on its way.

    ``admit`` counts the reschedule against the caller's limits: one unit of the create
    rate, and the bytes a longer message adds.
    """
    job = job_get(user_id=user_id, job_id=job_id)
    if admit is not None:
        growth = 0
        if change.message is not None:
            growth = stored_bytes_of(change.message, {}) - stored_bytes_of(job.message, {})
        admit(jobs=0, stored_bytes=max(0, growth), rate_units=1)
    fields: dict[str, Any] = {"updated_at": timezone.now()}
    if change.execute_at is not None:
        fields.update(execute_at=change.execute_at, due_at=change.execute_at)
    if change.message is not None:
        fields["message"] = change.message
    updated = (
        Job.objects.using(job._state.db)
        .filter(pk=job.pk, user_id=user_id, status=JobStatus.SCHEDULED, attempts=0)
        .update(**fields)
    )
    job = job_get(user_id=user_id, job_id=job_id)
    if updated:
        if job.execute_at <= store.dispatch_horizon(timezone.now()):
            store.wake_schedulers([job._state.db])
        return job
    if job.status == JobStatus.SCHEDULED:
        reason = f"it has run {job.attempts} attempt(s) and waits to be retried"
    else:
        reason = f"it is {job.status}"
    raise errors.JobNotReschedulable(
        f"Job {job_id} cannot be rescheduled: {reason}; only a scheduled job that has not "
        "been dispatched can be."
    )


MAX_ATTEMPTS_STORED = 32_767  # jobs.max_attempts is a smallint


def _retry_where(query: QuerySet[Job], *, extra_attempts: int) -> int:
    """Give the failed jobs of ``query`` ``extra_attempts`` more attempts, due now.

    The one statement every retry and redrive runs. The attempt count and the attempt
    history stay: the next dispatch starts attempt ``attempts + 1``, which no executor
    can have claimed before, so a late message of an earlier attempt still changes
    nothing.
    """
    now = timezone.now()
    return query.filter(
        status=JobStatus.FAILED, attempts__lte=MAX_ATTEMPTS_STORED - extra_attempts
    ).update(
        status=JobStatus.SCHEDULED,
        max_attempts=F("attempts") + extra_attempts,
        due_at=now,
        updated_at=now,
        dispatched_at=None,
        finished_at=None,
        lease_expires_at=None,
    )


def job_retry(*, user_id: int, job_id: str, extra_attempts: int, admit: Admit | None = None) -> Job:
    """Run a failed job again, with ``extra_attempts`` new attempts; 409 unless failed.

    ``admit`` counts the job, unfinished again, against the caller's limits.
    """
    job = job_get(user_id=user_id, job_id=job_id)
    if admit is not None and job.status == JobStatus.FAILED:
        admit(jobs=1, stored_bytes=stored_bytes_of(job.message, job.handler_params))
    query = Job.objects.using(job._state.db).filter(pk=job.pk, user_id=user_id)
    updated = _retry_where(query, extra_attempts=extra_attempts)
    job = job_get(user_id=user_id, job_id=job_id)
    if updated:
        store.wake_schedulers([job._state.db])
        return job
    if job.status == JobStatus.FAILED:
        reason = f"it has used {job.attempts} attempts, the most a job can have"
    else:
        reason = f"it is {job.status}"
    raise errors.JobNotRetryable(
        f"Job {job_id} cannot be retried: {reason}; only a failed job can be."
    )


def jobs_retry(
    *,
    user_id: int | None,
    job_filter: JobFilter,
    extra_attempts: int,
    admit: Admit | None = None,
) -> int:
    """Retry every failed job passing the filter: one user's, or (None) every user's.

    Every user's is the staff redrive of dead-lettered jobs. Shard by shard, in batches,
    like ``jobs_cancel``. ``admit`` first counts every matching job (and its bytes)
    against the caller's limits, all or none.
    """

    def failed(alias: str) -> QuerySet[Job]:
        query = jobs_matching(alias=alias, user_id=user_id, job_filter=job_filter)
        return query.filter(status=JobStatus.FAILED)

    if admit is not None:
        usages = [jobs_usage(failed(alias)) for alias in shard_aliases()]
        admit(jobs=sum(jobs for jobs, _ in usages), stored_bytes=sum(size for _, size in usages))
    retried = {
        alias: _in_batches(
            failed(alias), functools.partial(_retry_where, extra_attempts=extra_attempts)
        )
        for alias in shard_aliases()
    }
    store.wake_schedulers(alias for alias, count in retried.items() if count)
    return sum(retried.values())
