"""What the cluster page reads from one shard database: its lease and two bounded counts.

Each is an index scan whose cost is bounded: the due count stops at ``COUNT_LIMIT``
(the partial index of scheduled jobs, as the scheduler's own backlog gauge), the in-flight
count reads the partial index of queued and running jobs (at most the scheduler's
in-flight cap per shard). A statement timeout keeps a struggling shard from holding the
page.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import connections, transaction

from jobsvc.jobs.models import JobStatus
from jobsvc.postgresql.transaction_limits import limit_statements
from jobsvc.sharding.shards import shard_alias

COUNT_LIMIT = 100_000  # jobs; above it the page says "100,000+"

_LEASE = """
    SELECT epoch, owner, acquired_at, last_round_at
      FROM jobs_shard_lease WHERE shard_id = %(shard_id)s
"""
_COUNT_DUE = f"""
    SELECT count(*) FROM (SELECT 1 FROM jobs
                           WHERE status = '{JobStatus.SCHEDULED}' AND due_at <= now()
                           LIMIT %(limit)s) AS due
"""
_COUNT_IN_FLIGHT = f"""
    SELECT count(*) FROM (SELECT 1 FROM jobs
                           WHERE status IN ('{JobStatus.QUEUED}', '{JobStatus.RUNNING}')
                           LIMIT %(limit)s) AS in_flight
"""


@dataclass(frozen=True)
class ShardStats:
    shard_id: int
    epoch: int | None  # None: no scheduler has ever taken the shard
    lease_owner: str | None
    acquired_at: datetime | None
    last_round_at: datetime | None
    database_now: datetime
    due_backlog: int  # capped at COUNT_LIMIT
    in_flight: int  # capped at COUNT_LIMIT

    @property
    def seconds_since_last_round(self) -> float | None:
        if self.last_round_at is None:
            return None
        return max(0.0, (self.database_now - self.last_round_at).total_seconds())


def shard_stats(*, shard_id: int, timeout: float) -> ShardStats:
    """Raises django.db.Error if the shard cannot be reached or answer in ``timeout`` s."""
    alias = shard_alias(shard_id)
    params = {"shard_id": shard_id, "limit": COUNT_LIMIT}
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        limit_statements(cursor, timeout)
        cursor.execute(_LEASE, params)
        lease = cursor.fetchone()
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
        cursor.execute(_COUNT_DUE, params)
        (due,) = cursor.fetchone()
        cursor.execute(_COUNT_IN_FLIGHT, params)
        (in_flight,) = cursor.fetchone()
    epoch, owner, acquired_at, last_round_at = lease or (None, None, None, None)
    return ShardStats(
        shard_id=shard_id,
        epoch=epoch,
        lease_owner=owner or None,
        acquired_at=acquired_at,
        last_round_at=last_round_at,
        database_now=now,
        due_backlog=due,
        in_flight=in_flight,
    )
