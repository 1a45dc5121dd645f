"""What happened, read back at the end: every job's row in its shard, and the receiver's
deliveries; and, while the campaign runs, whether every shard runs jobs again."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import psycopg

from .system import System

ROWS = (
    "SELECT id, status, attempts, extract(epoch FROM execute_at)::float8,"
    " extract(epoch FROM started_at)::float8, extract(epoch FROM finished_at)::float8"
    " FROM jobs"
)
PREPARED = "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()"
# A job started at or after `since` that was due at or after `since`: the shard runs new work.
STARTED_SINCE = (
    "SELECT 1 FROM jobs WHERE execute_at >= to_timestamp(%(since)s)"
    " AND started_at >= to_timestamp(%(since)s) LIMIT 1"
)

# A job the system is behind on: due over a second ago and not started, or started by an
# executor whose lease ran out (dead or cut off: the sweeper makes the job due again).
BEHIND = (
    "SELECT 1 FROM jobs WHERE (status IN ('scheduled', 'queued')"
    " AND due_at < now() - interval '1 second')"
    " OR (status = 'running' AND lease_expires_at < now()) LIMIT 1"
)


# The latest first start, in seconds after execute_at, of the jobs due in a window; a job
# not started yet counts as starting now.
LATEST_START = (
    "SELECT max(extract(epoch FROM coalesce("
    "(SELECT min(a.started_at) FROM jobs_attempt a WHERE a.job_id = jobs.id),"
    " jobs.started_at, now()) - jobs.execute_at))::float8, count(*)"
    " FROM jobs WHERE execute_at >= to_timestamp(%(since)s)"
    " AND execute_at < to_timestamp(%(until)s)"
)


@dataclass(frozen=True)
class JobRow:
    id: str
    status: str
    attempts: int
    execute_at: float  # Unix seconds
    started_at: float | None  # of the last attempt
    finished_at: float | None
    shard: int


def job_rows(system: System) -> dict[str, JobRow]:
    rows: dict[str, JobRow] = {}
    for shard in range(len(system.shard_urls())):
        with system.shard_connection(shard) as conn:
            for row in conn.execute(ROWS).fetchall():
                rows[row[0]] = JobRow(*row, shard=shard)
    return rows


class ShardProbe:
    """Asks each shard whether it ran new work since a moment; reconnects after a fault."""

    def __init__(self, system: System) -> None:
        self._system = system
        self._connections: dict[int, psycopg.Connection] = {}

    def shards_running_since(self, since: float) -> set[int]:
        """The shards that started a job due since ``since``."""
        answers = self._ask(STARTED_SINCE, {"since": since})
        return {shard for shard, found in answers.items() if found}

    def shards_behind(self) -> set[int]:
        """The shards with a job the system is behind on (``BEHIND``), or not answering."""
        return {shard for shard, found in self._ask(BEHIND).items() if found is not False}

    def _ask(self, query: str, params: dict | None = None) -> dict[int, bool | None]:
        """Per shard: whether ``query`` found a row; None for a shard that did not answer
        (its connection is dropped, and opened again at the next question)."""
        answers: dict[int, bool | None] = {}
        for shard in range(len(self._system.shard_urls())):
            try:
                answers[shard] = self._conn(shard).execute(query, params).fetchone() is not None
            except psycopg.Error:
                self._drop(shard)
                answers[shard] = None
        return answers

    def close(self) -> None:
        for shard in list(self._connections):
            self._drop(shard)

    def _conn(self, shard: int) -> psycopg.Connection:
        if shard not in self._connections:
            self._connections[shard] = self._system.shard_connection(shard)
        return self._connections[shard]

    def _drop(self, shard: int) -> None:
        conn = self._connections.pop(shard, None)
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()


def latest_start(
    system: System, shards: list[int], since: float, until: float
) -> tuple[float, int]:
    """Over ``shards``, the jobs due (execute_at) from ``since`` to ``until``: the latest
    first start, in seconds after its due time (one not started counts as starting now),
    and how many there are."""
    latest, count = 0.0, 0
    for shard in shards:
        with system.shard_connection(shard) as conn:
            late, found = conn.execute(LATEST_START, {"since": since, "until": until}).fetchone()
        latest, count = max(latest, late or 0.0), count + found
    return latest, count


def user_jobs(system: System, user_id: int) -> dict[str, str]:
    """Every job of one user, on every shard: id -> message."""
    jobs: dict[str, str] = {}
    for shard in range(len(system.shard_urls())):
        with system.shard_connection(shard) as conn:
            found = conn.execute("SELECT id, message FROM jobs WHERE user_id = %s", (user_id,))
            jobs.update(dict(found.fetchall()))
    return jobs


def prepared_transactions(system: System) -> dict[str, int]:
    """Per shard, how many prepared transactions wait for their decision (through the
    shard's URL: after a failover, its promoted standby)."""
    counts = {}
    for shard in range(len(system.shard_urls())):
        with system.shard_connection(shard) as conn:
            (counts[f"shard {shard}"],) = conn.execute(PREPARED).fetchone()
    return counts
