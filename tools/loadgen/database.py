"""The tracker's lookup: jobs by primary key on one shard, through the ORM."""

from __future__ import annotations

from datetime import datetime

from django.db import Error as DatabaseError

from jobsvc.jobs.models import Job
from jobsvc.sharding.shards import shard_alias
from tools.loadgen.errors import ObservationFailed
from tools.loadgen.tracker import JobState


def lookup_jobs(shard: int, job_ids: list[str]) -> list[JobState]:
    """One query on the shard: the status and timestamps of those of ``job_ids`` it holds."""
    alias = shard_alias(shard)
    try:
        rows = list(
            Job.objects.using(alias)
            .filter(pk__in=job_ids)
            .values_list("id", "status", "dispatched_at", "started_at", "finished_at")
        )
    except DatabaseError as exc:
        raise ObservationFailed(f"{alias}: {exc}") from exc
    return [
        JobState(job_id, status, _epoch(dispatched), _epoch(started), _epoch(finished))
        for job_id, status, dispatched, started, finished in rows
    ]


def _epoch(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()
