"""One shard's jobs as an executor sees them: claim attempts, record their outcomes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.db import connections, transaction

from executor_worker import queries
from jobsvc.jobs.store import from_jsonb


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
    def __init__(self, *, alias: str, lease_grace_seconds: float) -> None:
        self.alias = alias
        self.lease_grace_seconds = lease_grace_seconds

    def claim(self, requests: Sequence[tuple[str, int]]) -> list[Attempt]:
        """Start the (job_id, attempt) pairs still startable; drop the rest silently."""
        if not requests:
            return []
        params = {
            "grace": self.lease_grace_seconds,
            "job_ids": [job_id for job_id, _ in requests],
            "attempts": [attempt for _, attempt in requests],
        }
        with connections[self.alias].cursor() as cursor:
            cursor.execute(queries.CLAIM, params)
            return [_attempt(row) for row in cursor.fetchall()]

    def record(self, outcomes: Sequence[Outcome]) -> None:
        """Write every outcome in one transaction (one commit per shard and batch)."""
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
            if failed:
                cursor.execute(queries.FAIL, {**_keys(failed), "errors": [o.error for o in failed]})

    def close(self) -> None:
        connections[self.alias].close()


def _attempt(row: tuple) -> Attempt:
    attempt = Attempt(*row)
    # Django's psycopg setup hands jsonb columns of raw queries back as text.
    return replace(
        attempt,
        handler_params=from_jsonb(attempt.handler_params),
        attempt_errors=from_jsonb(attempt.attempt_errors),
    )


def _keys(outcomes: Sequence[Outcome]) -> dict[str, list]:
    return {
        "job_ids": [o.attempt.job_id for o in outcomes],
        "attempts": [o.attempt.attempt for o in outcomes],
    }
