"""One shard's jobs as an executor sees them: claim attempts, record their outcomes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connections, transaction

from executor_worker import queries
from jobsvc.jobs.models import AttemptOutcome, JobStatus
from jobsvc.jobs.store import from_jsonb
from jobsvc.postgresql.transaction_limits import limit_idle
from jobsvc.sharding.shards import shard_alias


@dataclass(frozen=True)
class Attempt:
    """A claimed attempt: the job as the database had it when the attempt started."""

    job_id: str
    user_id: int
    shard_id: int
    attempt: int
    max_attempts: int
    timeout_seconds: float
    handler: str
    handler_params: dict[str, Any]
    message: str
    execute_at: datetime
    due_at: datetime
    created_at: datetime
    attempt_errors: list[dict[str, Any]]


@dataclass(frozen=True)
class Outcome:
    attempt: Attempt
    succeeded: bool
    error: str = ""
    retry_delay: float | None = None  # seconds; None with an error means a final failure
    timed_out: bool = False  # the handler did not finish within the attempt's timeout
    # What the handler reported of the system it called (jobsvc.handlers.base.HandlerResult),
    # kept in the attempt's history: an HTTP status and an excerpt of the answer's body.
    http_status: int | None = None
    response_excerpt: str | None = None
    # False: the handler did nothing (NotStarted). The job is due again after retry_delay,
    # and the attempt is not counted: no history, no error, the same number next time.
    started: bool = True

    @property
    def history_outcome(self) -> str:
        """The attempt's outcome as its history row (``JobAttempt.outcome``) names it."""
        if self.succeeded:
            return AttemptOutcome.SUCCEEDED.value
        if self.timed_out:
            return AttemptOutcome.TIMED_OUT.value
        if self.retry_delay is not None:
            return AttemptOutcome.RETRIED.value
        return AttemptOutcome.FAILED.value


class ClaimRequest(NamedTuple):
    """An attempt a message asks to start, as a claim checks it (``queries._NAMED``)."""

    job_id: str
    attempt: int
    user_id: int
    due_at: datetime


class ClaimStore:
    """One shard's jobs, for claims and outcomes. Running attempts hold a lease of
    ``lease_seconds``, renewed (``renew``) while they run: an executor that dies or is cut
    off loses them that soon, and the scheduler's sweeper makes them due again."""

    def __init__(self, *, shard_id: int, lease_seconds: float) -> None:
        self.shard_id = shard_id
        self.alias = shard_alias(shard_id)
        self.lease_seconds = lease_seconds

    def claim(self, requests: Sequence[ClaimRequest]) -> list[Attempt]:
        """Start the requested attempts still startable and due by the database's clock;
        drop the rest silently (see ``not_yet_due``)."""
        if not requests:
            return []
        with connections[self.alias].cursor() as cursor:
            cursor.execute(queries.CLAIM, {**_named(requests), "lease": self.lease_seconds})
            return [_attempt(row) for row in cursor.fetchall()]

    def claim_succeeded(
        self, requests: Sequence[ClaimRequest], *, handlers: Sequence[str]
    ) -> list[Attempt]:
        """Start the startable requests whose job has one of ``handlers``, already succeeded:
        only in a transaction that runs them before its commit (``reopen``: those that failed)."""
        if not requests or not handlers:
            return []
        with connections[self.alias].cursor() as cursor:
            cursor.execute(
                queries.CLAIM_SUCCEEDED, {**_named(requests), "handlers": list(handlers)}
            )
            # No history row: a job's row is the record of its last attempt, and for an
            # inline success it holds all there is (``job_attempts`` lists it from there).
            return [_attempt(row) for row in cursor.fetchall()]

    def not_yet_due(self, requests: Sequence[ClaimRequest]) -> dict[tuple[str, int], float]:
        """Of requests a claim did not start, those it would start once due, with their due
        time on the database's clock (seconds since the epoch); the others are stale,
        duplicates or cancelled, and will never start from this message."""
        if not requests:
            return {}
        with connections[self.alias].cursor() as cursor:
            cursor.execute(queries.NOT_YET_DUE, _named(requests))
            return {(job_id, attempt): due for job_id, attempt, due in cursor.fetchall()}

    def reopen(self, attempts: Sequence[Attempt]) -> None:
        """Make attempts from ``claim_succeeded`` running, as ``claim`` would have."""
        with connections[self.alias].cursor() as cursor:
            cursor.execute(queries.REOPEN, {**_keys(attempts), "lease": self.lease_seconds})

    def renew(self, running: Sequence[tuple[str, int]]) -> int:
        """Extend the leases of these running (job_id, attempt) pairs; how many were still
        this attempt's (the others were given up: the sweeper took them back)."""
        if not running:
            return 0
        params = {
            "job_ids": [job_id for job_id, _ in running],
            "attempts": [attempt for _, attempt in running],
            "lease": self.lease_seconds,
        }
        with connections[self.alias].cursor() as cursor:
            cursor.execute(queries.RENEW_LEASES, params)
            return cursor.rowcount

    def database_clock(self) -> float:
        """The database's clock now, in seconds since the epoch."""
        with connections[self.alias].cursor() as cursor:
            cursor.execute(queries.DATABASE_CLOCK)
            return cursor.fetchone()[0]

    def record(self, outcomes: Sequence[Outcome]) -> None:
        """Write every outcome in one transaction (one commit per shard and batch).

        The executor records final failures through ``fail`` instead, in the transaction
        that publishes their dead letters.
        """
        not_started = [o for o in outcomes if not o.started]
        started = [o for o in outcomes if o.started]
        succeeded = [o for o in started if o.succeeded]
        retried = [o for o in started if not o.succeeded and o.retry_delay is not None]
        failed = [o for o in started if not o.succeeded and o.retry_delay is None]
        with transaction.atomic(using=self.alias), connections[self.alias].cursor() as cursor:
            if not_started:
                cursor.execute(queries.NOT_STARTED, _outcomes(not_started))
            if succeeded:
                cursor.execute(queries.SUCCEED, _keys(o.attempt for o in succeeded))
                _record_history(cursor, succeeded, status=JobStatus.SUCCEEDED.value)
            if retried:
                cursor.execute(queries.RETRY, _outcomes(retried))
                _record_history(cursor, retried, status=JobStatus.SCHEDULED.value)
            self.fail(failed)

    def fail(self, outcomes: Sequence[Outcome]) -> set[tuple[str, int]]:
        """Mark final failures failed; return the (job_id, attempt) pairs that changed.

        An attempt that is no longer running (the sweeper gave it up) changes nothing. Call
        inside a transaction that publishes the dead letters of the returned attempts
        before it commits (the rows stay locked meanwhile).
        """
        if not outcomes:
            return set()
        with connections[self.alias].cursor() as cursor:
            cursor.execute(queries.FAIL, _outcomes(outcomes))
            changed = {(job_id, attempt) for job_id, attempt in cursor.fetchall()}
            if changed:
                _record_history(cursor, outcomes, status=JobStatus.FAILED.value)
            return changed

    def allow_idle(self, seconds: float) -> None:
        """Inside a transaction: PostgreSQL ends it only after ``seconds`` idle, for the
        rest of it (JOBSVC_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS otherwise)."""
        with connections[self.alias].cursor() as cursor:
            limit_idle(cursor, seconds)


def _attempt(row: tuple) -> Attempt:
    """A row of ``queries._RETURNING``, whose columns are ``Attempt``'s fields in order."""
    *first, params, message, execute_at, due_at, created_at, errors = row
    return Attempt(
        *first, from_jsonb(params), message, execute_at, due_at, created_at, from_jsonb(errors)
    )


def _named(requests: Sequence[ClaimRequest]) -> dict[str, list]:
    return {
        "job_ids": [r.job_id for r in requests],
        "attempts": [r.attempt for r in requests],
        "user_ids": [r.user_id for r in requests],
        "due_ats": [r.due_at for r in requests],
    }


def _keys(attempts: Iterable[Attempt]) -> dict[str, list]:
    attempts = list(attempts)
    return {"job_ids": [a.job_id for a in attempts], "attempts": [a.attempt for a in attempts]}


def _outcomes(outcomes: Sequence[Outcome]) -> dict[str, list]:
    """The parameters of NOT_STARTED, RETRY and FAIL (``queries._FINISHED_ATTEMPTS``)."""
    return {
        **_keys(o.attempt for o in outcomes),
        "delays": [o.retry_delay for o in outcomes],
        "errors": [o.error for o in outcomes],
    }


def _record_history(cursor, outcomes: Sequence[Outcome], *, status: str) -> None:
    """The outcomes' attempt history rows (queries.RECORD_ATTEMPTS), in the transaction
    of the statement that just gave their jobs ``status``."""
    params = {
        **_keys(o.attempt for o in outcomes),
        "status": status,
        "outcomes": [o.history_outcome for o in outcomes],
        "errors": [o.error or None for o in outcomes],
        "http_statuses": [o.http_status for o in outcomes],
        "excerpts": [o.response_excerpt for o in outcomes],
    }
    cursor.execute(queries.RECORD_ATTEMPTS, params)
