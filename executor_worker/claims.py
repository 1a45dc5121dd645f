"""One shard's jobs as an executor sees them: claim attempts, record their outcomes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections, transaction

from executor_worker import queries
from jobsvc.jobs.store import from_jsonb
from jobsvc.messaging.job_message import JobMessage
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


class ClaimStore:
    def __init__(self, *, shard_id: int, lease_grace_seconds: float) -> None:
        self.shard_id = shard_id
        self.alias = shard_alias(shard_id)
        self.lease_grace_seconds = lease_grace_seconds

    def claim(self, requests: Sequence[tuple[str, int]], *, stolen: bool = False) -> list[Attempt]:
        """Start the (job_id, attempt) pairs still startable; drop the rest silently.

        ``stolen``: jobs found by ``work_to_steal``, whose messages another executor
        holds: one that another transaction has locked is dropped, not waited for (see
        queries.CLAIM_UNLOCKED)."""
        if not requests:
            return []
        params = {
            "grace": self.lease_grace_seconds,
            "job_ids": [job_id for job_id, _ in requests],
            "attempts": [attempt for _, attempt in requests],
        }
        with connections[self.alias].cursor() as cursor:
            cursor.execute(queries.CLAIM_UNLOCKED if stolen else queries.CLAIM, params)
            return [_attempt(row) for row in cursor.fetchall()]

    def startable(self, requests: Sequence[tuple[str, int]]) -> set[tuple[str, int]]:
        """The (job_id, attempt) pairs that ``claim`` would start now (see
        queries.STARTABLE)."""
        if not requests:
            return set()
        params = {
            "job_ids": [job_id for job_id, _ in requests],
            "attempts": [attempt for _, attempt in requests],
        }
        with connections[self.alias].cursor() as cursor:
            cursor.execute(queries.STARTABLE, params)
            return {(job_id, attempt) for job_id, attempt in cursor.fetchall()}

    def work_to_steal(
        self,
        weights: dict[int, float],
        *,
        per_user: int,
        held: Sequence[str] = (),
        waited: float = 0.0,
    ) -> list[JobMessage]:
        """Of each user's published, due, unstarted jobs, the newest half, at most
        ``per_user``, as the messages the scheduler sent for them (``weights``: the users'
        weights, which messages carry). Left out: the jobs in ``held``, and those
        published or due less than ``waited`` seconds ago. Nothing is claimed (see
        queries.WORK_STOLEN)."""
        if not weights:
            return []
        params = {
            "users": list(weights),
            "per_user": per_user,
            "held": list(held),
            "waited": waited,
        }
        with connections[self.alias].cursor() as cursor:
            cursor.execute(queries.WORK_STOLEN, params)
            rows = cursor.fetchall()
        return [
            JobMessage(
                job_id=job_id,
                shard_id=self.shard_id,
                user_id=user_id,
                attempt=attempt,
                epoch=epoch,
                due_at=due_at,
                dispatched_at=dispatched_at,
                weight=weights[user_id],
                priority=priority,
                handler=handler,
            )
            for job_id, attempt, user_id, priority, handler, due_at, dispatched_at, epoch in rows
        ]

    def claim_succeeded(
        self, requests: Sequence[tuple[str, int]], *, handlers: Sequence[str], stolen: bool = False
    ) -> list[Attempt]:
        """Start the startable pairs whose job has one of ``handlers``, already succeeded.

        Only inside a transaction that runs those handlers before it commits (and
        ``reopen``s the attempts whose handler failed). ``stolen``: as for ``claim``.
        """
        if not requests or not handlers:
            return []
        params = {
            "job_ids": [job_id for job_id, _ in requests],
            "attempts": [attempt for _, attempt in requests],
            "handlers": list(handlers),
        }
        with connections[self.alias].cursor() as cursor:
            query = queries.CLAIM_SUCCEEDED_UNLOCKED if stolen else queries.CLAIM_SUCCEEDED
            cursor.execute(query, params)
            return [_attempt(row) for row in cursor.fetchall()]

    def reopen(self, attempts: Sequence[Attempt]) -> None:
        """Make attempts from ``claim_succeeded`` running, as ``claim`` would have."""
        params = {
            "grace": self.lease_grace_seconds,
            "job_ids": [a.job_id for a in attempts],
            "attempts": [a.attempt for a in attempts],
        }
        with connections[self.alias].cursor() as cursor:
            cursor.execute(queries.REOPEN, params)

    def record(self, outcomes: Sequence[Outcome]) -> None:
        """Write every outcome in one transaction (one commit per shard and batch).

        The executor records final failures through ``fail`` instead, in the transaction
        that publishes their dead letters.
        """
        succeeded = [o for o in outcomes if o.succeeded]
        retried = [o for o in outcomes if not o.succeeded and o.retry_delay is not None]
        failed = [o for o in outcomes if not o.succeeded and o.retry_delay is None]
        with transaction.atomic(using=self.alias), connections[self.alias].cursor() as cursor:
            if succeeded:
                cursor.execute(queries.SUCCEED, _keys(succeeded))
            if retried:
                cursor.execute(
                    queries.RETRY,
                    {
                        **_keys(retried),
                        "delays": [o.retry_delay for o in retried],
                        "errors": [o.error for o in retried],
                    },
                )
            self.fail(failed)

    def fail(self, outcomes: Sequence[Outcome]) -> set[tuple[str, int]]:
        """Mark final failures failed; return the (job_id, attempt) pairs that changed.

        An attempt that is no longer running (the sweeper gave it up) changes nothing. Call
        inside a transaction that publishes the dead letters of the returned attempts
        before it commits (the rows stay locked meanwhile).
        """
        if not outcomes:
            return set()
        params = {**_keys(outcomes), "errors": [o.error for o in outcomes]}
        with connections[self.alias].cursor() as cursor:
            cursor.execute(queries.FAIL, params)
            return {(job_id, attempt) for job_id, attempt in cursor.fetchall()}

    def allow_idle(self, seconds: float) -> None:
        """Inside a transaction: PostgreSQL ends it only after ``seconds`` idle, for the
        rest of it (JOBSVC_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS otherwise)."""
        with connections[self.alias].cursor() as cursor:
            limit_idle(cursor, seconds)

    def close(self) -> None:
        connections[self.alias].close()


def _attempt(row: tuple) -> Attempt:
    (job_id, user_id, shard_id, attempt, max_attempts, timeout, handler, params, message,
     execute_at, due_at, created_at, errors) = row  # fmt: skip
    return Attempt(
        job_id=job_id,
        user_id=user_id,
        shard_id=shard_id,
        attempt=attempt,
        max_attempts=max_attempts,
        timeout_seconds=timeout,
        handler=handler,
        handler_params=_jsonb(params),
        message=message,
        execute_at=execute_at,
        due_at=due_at,
        created_at=created_at,
        attempt_errors=_jsonb(errors),
    )


def _jsonb(value: Any) -> Any:
    """A jsonb column of a raw query: Django's psycopg setup hands it back as text.

    Most jobs have no parameters and no errors yet: those skip the JSON parser.
    """
    if value == "{}":
        return {}
    if value == "[]":
        return []
    return from_jsonb(value)


def _keys(outcomes: Sequence[Outcome]) -> dict[str, list]:
    return {
        "job_ids": [o.attempt.job_id for o in outcomes],
        "attempts": [o.attempt.attempt for o in outcomes],
    }
