"""One shard's database as a scheduler sees it: lease, due users, claims and sweeps."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.db import connections, transaction

from jobsvc.jobs.priorities import PRIORITY_DEFAULT
from jobsvc.jobs.store import DUE_NOW_CHANNEL, from_jsonb
from jobsvc.postgresql.transaction_limits import limit_idle
from scheduler_worker import queries
from scheduler_worker.errors import ShardFenced

# Seconds a fenced transaction may sit idle (the client between statements) before
# PostgreSQL ends it. Each write holds the lease row FOR SHARE, so a paused owner (SIGSTOP,
# a GC pause, a stopped VM) would otherwise keep the next owner's ACQUIRE_LEASE waiting
# until it resumed. Shorter than the ZooKeeper session timeout (JOBSVC_ZK_SESSION_TIMEOUT_
# SECONDS, 4-5 s), so the lock is gone by the time another worker is given the shard. Our
# statements follow each other within milliseconds (fail_abandoned extends it to publish).
IDLE_IN_TRANSACTION_TIMEOUT = 2.0


@dataclass(frozen=True)
class ClaimedJob:
    job_id: str
    user_id: int
    attempts: int  # attempts already made; this dispatch starts attempt attempts + 1
    due_at: datetime
    dispatched_at: datetime
    priority: int = PRIORITY_DEFAULT  # within the user's own jobs; higher first
    handler: str | None = None  # the handler's name (executors pace thread-pool jobs)
    partition: int | None = None  # the jobs topic's; None: the message key's


# Each picked job's partition, given the owners (user ids) of the picked jobs in pick order.
Deal = Callable[[list[int]], list[int | None]]


def picked_hand(picked: list[tuple], partitions: list[int | None]) -> dict[str, list]:
    """CLAIM_PICKED's parameters for the rows PICK_FOR_DISPATCH returned (ctid, id,
    user), each to go to its partition in ``partitions``."""
    return {
        "ctids": [ctid for ctid, _, _ in picked],
        "ids": [job_id for _, job_id, _ in picked],
        "partitions": partitions,
    }


@dataclass(frozen=True)
class AbandonedJob:
    job_id: str
    user_id: int
    attempts: int
    max_attempts: int
    handler: str
    handler_params: dict[str, Any]
    message: str
    execute_at: datetime
    created_at: datetime
    attempt_errors: list[dict[str, Any]]


@dataclass(frozen=True)
class SweepResult:
    unclaimed: int
    abandoned: int


class ShardStore:
    def __init__(self, *, alias: str, shard_id: int) -> None:
        self.alias = alias
        self.shard_id = shard_id
        self._listening_on: object | None = None  # the connection that LISTENs, if any

    def acquire_lease(self, *, owner: str) -> int:
        """Take the shard over: bump and return its epoch, fencing off any older owner."""
        with transaction.atomic(using=self.alias), self._cursor() as cursor:
            cursor.execute(queries.ACQUIRE_LEASE, {"shard_id": self.shard_id, "owner": owner})
            return cursor.fetchone()[0]

    def reset_older_dispatches(self, *, epoch: int) -> int:
        """Make due again the jobs older owners claimed that no executor started; how many
        (why: ``queries.RESET_OLDER_DISPATCHES``). A message sent after all still starts
        its job (a claim takes it from ``scheduled``); the later dispatch's is dropped."""
        with self._fenced(epoch) as cursor:
            cursor.execute(queries.RESET_OLDER_DISPATCHES, {"epoch": epoch})
            return cursor.rowcount

    def record_round(self, *, epoch: int) -> None:
        """Note that the owner under ``epoch`` ran a dispatch round just now."""
        with self._cursor() as cursor:
            cursor.execute(queries.RECORD_ROUND, {"shard_id": self.shard_id, "epoch": epoch})

    def in_flight(self) -> dict[tuple[int, int | None], int]:
        """Published, unfinished jobs (queued or running) per user and partition."""
        with self._cursor() as cursor:
            cursor.execute(queries.COUNT_IN_FLIGHT)
            return {(user, partition): count for user, partition, count in cursor.fetchall()}

    def oldest_due_age(self) -> float:
        """Seconds the oldest due, unstarted job has waited since due (0: none is due)."""
        with self._cursor() as cursor:
            cursor.execute(queries.OLDEST_DUE_AGE)
            return cursor.fetchone()[0]

    def due_backlog(self) -> int:
        with self._cursor() as cursor:
            cursor.execute(queries.COUNT_DUE)
            return cursor.fetchone()[0]

    def due_users(self, *, ahead: float = 0.0) -> list[int]:
        """Users with scheduled jobs due within ``ahead`` seconds."""
        with self._cursor() as cursor:
            cursor.execute(queries.DUE_USERS, {"ahead": ahead})
            return [row[0] for row in cursor.fetchall()]

    def claim(
        self,
        *,
        epoch: int,
        quotas: dict[int, int],
        queued_timeout: float,
        ahead: float = 0.0,
        deal: Deal | None = None,
    ) -> list[ClaimedJob]:
        """Mark up to ``quotas[user]`` jobs of each user due within ``ahead`` seconds
        queued, under our epoch; ``deal`` gives each one's partition (by default, none)."""
        users = [user for user, quota in quotas.items() if quota > 0]
        if not users:
            return []
        pick = {"user_ids": users, "quotas": [quotas[user] for user in users], "ahead": ahead}
        with self._fenced(epoch) as cursor:
            cursor.execute(queries.PICK_FOR_DISPATCH, pick)
            picked = cursor.fetchall()
            if not picked:
                return []
            owners = [user for _, _, user in picked]
            partitions = deal(owners) if deal else [None] * len(picked)
            claim = {"epoch": epoch, "queued_timeout": queued_timeout}
            cursor.execute(queries.CLAIM_PICKED, {**picked_hand(picked, partitions), **claim})
            return [ClaimedJob(*row) for row in cursor.fetchall()]

    def release(self, *, epoch: int, job_ids: list[str]) -> int:
        """Make jobs whose messages were not acknowledged due again."""
        with self._fenced(epoch) as cursor:
            cursor.execute(queries.RELEASE_UNPUBLISHED, {"epoch": epoch, "job_ids": job_ids})
            return cursor.rowcount

    def sweep(self, *, epoch: int) -> SweepResult:
        """Make lost messages' and dead executors' jobs due again (those with attempts left)."""
        with self._fenced(epoch) as cursor:
            cursor.execute(queries.SWEEP_UNCLAIMED)
            unclaimed = cursor.rowcount
            cursor.execute(queries.SWEEP_ABANDONED, {"error": queries.LOST_ATTEMPT_ERROR})
            abandoned = _record_lost(cursor, cursor.fetchall())
            return SweepResult(unclaimed=unclaimed, abandoned=abandoned)

    def purge_finished_jobs(self, *, finished_before: datetime, limit: int) -> int:
        """Delete up to ``limit`` jobs that finished before ``finished_before``, oldest first
        (not fenced: ``scheduler_worker.sweeper`` says why)."""
        with self._cursor() as cursor:
            cursor.execute(
                queries.PURGE_FINISHED_JOBS, {"finished_before": finished_before, "limit": limit}
            )
            return cursor.fetchone()[0]

    def purge_expired_idempotency_keys(self, *, expired_at: datetime, limit: int) -> int:
        """Delete up to ``limit`` Idempotency-Keys recorded at or before ``expired_at`` (not
        fenced: ``scheduler_worker.sweeper`` says why)."""
        with self._cursor() as cursor:
            cursor.execute(
                queries.PURGE_EXPIRED_IDEMPOTENCY_KEYS, {"expired_at": expired_at, "limit": limit}
            )
            return cursor.rowcount

    def purge_bulk_decisions(self, *, decided_before: datetime, limit: int) -> int:
        """Delete up to ``limit`` decisions of spread bulk requests made before
        ``decided_before`` (long after their prepared transactions were resolved)."""
        with self._cursor() as cursor:
            cursor.execute(
                queries.PURGE_BULK_DECISIONS, {"decided_before": decided_before, "limit": limit}
            )
            return cursor.rowcount

    def fail_abandoned(
        self,
        *,
        epoch: int,
        dead_letter: Callable[[list[AbandonedJob]], bool],
        dead_letter_timeout: float = 30.0,
        limit: int = 500,
    ) -> int:
        """Fail dead executors' jobs that have no attempts left, dead-lettering them first.

        The jobs' rows stay locked while ``dead_letter`` publishes (for at most
        ``dead_letter_timeout`` seconds); if it fails, nothing changes and the next sweep
        tries again. The lease row is locked only once the letters are acknowledged, so an
        owner paused while publishing keeps the next owner waiting no longer than any other
        write does (IDLE_IN_TRANSACTION_TIMEOUT). If the shard was taken over meanwhile,
        ShardFenced is raised and nothing changes: the new owner fails the jobs (their
        letters are then published twice, as after any publish whose commit is lost).
        """
        with transaction.atomic(using=self.alias), self._cursor() as cursor:
            limit_idle(cursor, IDLE_IN_TRANSACTION_TIMEOUT + dead_letter_timeout)
            self._check_epoch(cursor, epoch, queries.READ_LEASE)
            cursor.execute(queries.ABANDONED_EXHAUSTED, {"limit": limit})
            jobs = [
                replace(
                    job,
                    handler_params=from_jsonb(job.handler_params),
                    attempt_errors=from_jsonb(job.attempt_errors),
                )
                for job in (AbandonedJob(*row) for row in cursor.fetchall())
            ]
            if not jobs or not dead_letter(jobs):
                return 0
            limit_idle(cursor, IDLE_IN_TRANSACTION_TIMEOUT)
            self._check_epoch(cursor, epoch, queries.LOCK_LEASE)
            cursor.execute(
                queries.FAIL_ABANDONED,
                {"job_ids": [job.job_id for job in jobs], "error": queries.LOST_ATTEMPT_ERROR},
            )
            return _record_lost(cursor, cursor.fetchall())

    def listen_for_jobs_due_now(self) -> None:
        """Hear what the API says on this shard (``DUE_NOW_CHANNEL``) from now on, if this
        connection does not already: run before a round looks for due jobs, no job made
        due after the look goes unheard."""
        connection = connections[self.alias]
        with connection.wrap_database_errors:
            connection.ensure_connection()
            if connection.connection is not self._listening_on:
                connection.connection.execute(f"LISTEN {DUE_NOW_CHANNEL}")
                self._listening_on = connection.connection

    def wait_for_jobs_due_now(self, timeout: float) -> bool:
        """Until the API says jobs are due now on this shard: True, or ``timeout`` seconds:
        False. What it said since the last wait counts; a connection that does not listen
        (``listen_for_jobs_due_now``) hears nothing."""
        connection = connections[self.alias]
        with connection.wrap_database_errors:
            connection.ensure_connection()
            # A list: every notification received so far is consumed, not only the first.
            return bool(list(connection.connection.notifies(timeout=timeout, stop_after=1)))

    def close(self) -> None:
        connections[self.alias].close()

    def _cursor(self):
        return connections[self.alias].cursor()

    @contextmanager
    def _fenced(self, epoch: int) -> Iterator:
        """A transaction that holds the lease row shared and proceeds only under ``epoch``
        (PostgreSQL ends it after IDLE_IN_TRANSACTION_TIMEOUT idle: a DatabaseError)."""
        with transaction.atomic(using=self.alias), self._cursor() as cursor:
            limit_idle(cursor, IDLE_IN_TRANSACTION_TIMEOUT)
            self._check_epoch(cursor, epoch, queries.LOCK_LEASE)
            yield cursor

    def _check_epoch(self, cursor, epoch: int, read_lease: str) -> None:
        cursor.execute(read_lease, {"shard_id": self.shard_id})
        row = cursor.fetchone()
        current = None if row is None else row[0]
        if current != epoch:
            raise ShardFenced(f"shard {self.shard_id}: epoch is {current}, ours is {epoch}")


def _record_lost(cursor, ended: list[tuple[str, int, datetime | None]]) -> int:
    """Write the history rows of attempts the sweeper ended as lost; how many it ended."""
    if ended:
        params = {
            "job_ids": [job_id for job_id, _, _ in ended],
            "attempts": [attempt for _, attempt, _ in ended],
            "started": [started for _, _, started in ended],
            "error": queries.LOST_ATTEMPT_ERROR,
        }
        cursor.execute(queries.RECORD_LOST_ATTEMPTS, params)
    return len(ended)
