"""Writes to jobs: create (one or many, optionally idempotent); cancel, reschedule, retry."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from jobsvc import errors
from jobsvc.jobs import spread, store
from jobsvc.jobs.limits import stored_bytes_of
from jobsvc.jobs.models import CANCELLABLE_STATUSES, Job, JobStatus
from jobsvc.jobs.selectors import JobFilter, job_get, jobs_matching, jobs_usage
from jobsvc.jobs.specs import JobSpec, RescheduleSpec
from jobsvc.metrics import JOBS_CREATED
from jobsvc.sharding.ids import new_job_id, shard_of
from jobsvc.sharding.shards import (
    pick_shard_for_new_jobs,
    shard_alias,
    shard_aliases,
    shard_count,
    shard_for_idempotency_key,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CreateResult:
    jobs: list[Job] | list[store.JobRow]
    created: bool  # False when an Idempotency-Key replayed an earlier request


def jobs_create(
    *, user_id: int, specs: list[JobSpec], is_bulk: bool, idempotency_key: str | None = None
) -> CreateResult:
    """Create jobs all or none; with a key, a retry returns the first result.

    A request of ``BULK_SPREAD_MIN_JOBS`` or more is dealt over every shard, created by
    two-phase commit (``jobsvc.jobs.spread``): a user's jobs are then dispatched by every
    shard's scheduler, not by one or two. A smaller one goes to one shard, in one local
    transaction. Requests without a key pick their (first) shard at random; a key decides
    it by hashing, so every retry looks in the same place.
    """
    if (
        settings.BULK_SPREAD_MIN_JOBS
        and len(specs) >= settings.BULK_SPREAD_MIN_JOBS
        and shard_count() > 1
        and _two_phase_allowed
        and not spread.inside_a_transaction()
    ):
        try:
            return _create(
                user_id=user_id,
                specs=specs,
                is_bulk=is_bulk,
                idempotency_key=idempotency_key,
                spread_over_shards=True,
            )
        except spread.TwoPhaseUnavailable as exc:
            _two_phase_not_allowed(exc)
    return _create(
        user_id=user_id,
        specs=specs,
        is_bulk=is_bulk,
        idempotency_key=idempotency_key,
        spread_over_shards=False,
    )


def _create(
    *,
    user_id: int,
    specs: list[JobSpec],
    is_bulk: bool,
    idempotency_key: str | None,
    spread_over_shards: bool,
) -> CreateResult:
    """The request's rows on their shard (or dealt over every shard, from the first),
    inserted with the key's claim if there is a key; the first result if the key is in use."""
    first = _first_shard(user_id, idempotency_key)
    now = timezone.now()
    if spread_over_shards:
        shard_ids = spread.deal(len(specs), shards=shard_count(), first=first)
    else:
        shard_ids = [first] * len(specs)
    rows = _new_rows(user_id, specs, shard_ids, now=now)
    insert = spread.insert_spread if spread_over_shards else _insert_on_one_shard
    if idempotency_key is None:
        insert(rows, coordinator=first, claim_key=None)
    else:
        request_hash = _request_hash(specs, is_bulk=is_bulk)
        claim_key = functools.partial(
            _claim_key,
            user_id=user_id,
            key=idempotency_key,
            request_hash=request_hash,
            rows=rows,
            is_bulk=is_bulk,
            now=now,
        )
        if not insert(rows, coordinator=first, claim_key=claim_key):
            return _replay(shard_alias(first), user_id, idempotency_key, request_hash)
    JOBS_CREATED.inc(len(rows))
    horizon = _dispatch_horizon(now)
    due_now = {row.shard_id for row in rows if row.execute_at <= horizon}
    _wake_schedulers(shard_alias(shard_id) for shard_id in due_now)
    return CreateResult(jobs=rows, created=True)


def _dispatch_horizon(now: datetime) -> datetime:
    """The latest due time a scheduler dispatches at ``now``: it sends jobs up to
    ``SCHEDULER_DISPATCH_AHEAD`` seconds before their time."""
    return now + timedelta(seconds=settings.SCHEDULER_DISPATCH_AHEAD)


def _wake_schedulers(aliases: Iterable[str]) -> None:
    """Tell the schedulers of these shards that jobs are due now, so that their next
    round starts at once (``store.notify_due_now``), after the jobs' commit. Best effort:
    the jobs are committed, and a round finds them within the poll interval anyway."""
    for alias in sorted(set(aliases)):
        try:
            store.notify_due_now(alias)
        except DatabaseError as exc:
            logger.warning("cannot tell %s's scheduler that jobs are due now: %s", alias, exc)


def _insert_on_one_shard(
    rows: list[store.JobRow], *, coordinator: int, claim_key: Callable[[str], bool] | None
) -> bool:
    """Insert the rows on the ``coordinator`` shard; False if ``claim_key`` refused."""
    alias = shard_alias(coordinator)
    if claim_key is None:
        # One INSERT (or one COPY) is atomic by itself: no BEGIN/COMMIT round trips needed.
        store.insert_jobs(alias, rows)
        return True
    with transaction.atomic(using=alias):
        if not claim_key(alias):
            return False
        store.insert_jobs(alias, rows)
    return True


def _first_shard(user_id: int, idempotency_key: str | None) -> int:
    """The request's shard (or a spread request's coordinator): at random, or, with a key,
    by hashing, so that every retry looks in the same place."""
    if idempotency_key is None:
        return pick_shard_for_new_jobs()
    return shard_for_idempotency_key(user_id=user_id, key=idempotency_key)


def _new_rows(
    user_id: int, specs: list[JobSpec], shard_ids: list[int], *, now: datetime
) -> list[store.JobRow]:
    return [
        store.new_job_row(
            job_id=new_job_id(shard_id=shard_id, at=now),
            user_id=user_id,
            spec=spec,
            shard_id=shard_id,
            now=now,
        )
        for shard_id, spec in zip(shard_ids, specs, strict=True)
    ]


def _claim_key(
    alias: str,
    *,
    user_id: int,
    key: str,
    request_hash: str,
    rows: list[store.JobRow],
    is_bulk: bool,
    now: datetime,
) -> bool:
    """Record the Idempotency-Key with the request's jobs; False if it is in use."""
    return store.claim_idempotency_key(
        alias,
        user_id=user_id,
        key=key,
        request_hash=request_hash,
        job_ids=[row.id for row in rows],
        is_bulk=is_bulk,
        now=now,
        ttl=settings.IDEMPOTENCY_KEY_TTL,
    )


_two_phase_allowed = True


def _two_phase_not_allowed(exc: spread.TwoPhaseUnavailable) -> None:
    """Create on one shard from now on in this process; say why, once."""
    global _two_phase_allowed
    _two_phase_allowed = False
    logger.warning(
        "bulk requests go to one shard each: the shard servers do not allow prepared "
        "transactions (set max_prepared_transactions > 0 to spread them): %s",
        exc,
    )


def _replay(alias: str, user_id: int, key: str, request_hash: str) -> CreateResult:
    first_hash, job_ids, _ = store.read_idempotency_key(alias, user_id=user_id, key=key)
    if first_hash != request_hash:
        raise errors.IdempotencyKeyReused(
            "This Idempotency-Key was already used with a different request body."
        )
    jobs = store.jobs_by_ids(job_ids)
    if len(jobs) < len(job_ids):
        # A spread request that lost a shard after its commit point: that shard's share
        # is still prepared, invisible, until resolved. Resolve it now, not at the sweep.
        missing = set(job_ids).difference(job.id for job in jobs)
        for shard_id in sorted({shard_of(job_id) for job_id in missing}):
            spread.resolve_prepared(shard_alias(shard_id), shard_id)
        jobs = store.jobs_by_ids(job_ids)
    return CreateResult(jobs=jobs, created=False)


def _request_hash(specs: list[JobSpec], *, is_bulk: bool) -> str:
    """A digest of the whole validated request: every field of every spec, by name.

    Hashing the validated specs (not the raw body) makes equal requests equal however
    they were spelled (another time zone, a default left out or written out), and any
    field added to ``JobSpec`` is covered without touching this function.
    """
    canonical = json.dumps(
        [is_bulk, [_spec_fields(spec) for spec in specs]],
        separators=(",", ":"),
        sort_keys=True,
    )
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def _spec_fields(spec: JobSpec) -> dict[str, Any]:
    fields = dataclasses.asdict(spec)
    if spec.delay_seconds is not None:
        del fields["execute_at"]  # now + delay: it differs on every retry of one request
    return {
        name: value.isoformat() if isinstance(value, datetime) else value
        for name, value in fields.items()
    }


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
        if job.execute_at <= _dispatch_horizon(timezone.now()):
            _wake_schedulers([job._state.db])
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
        _wake_schedulers([job._state.db])
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
    _wake_schedulers(alias for alias, count in retried.items() if count)
    return sum(retried.values())
