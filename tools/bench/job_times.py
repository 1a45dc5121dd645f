"""Every job's times, saved for a closer look: ``make bench ARGS='--job-times ...'``.

A scenario's figures say how far off a user was; finding out why takes each job's path:
which shard it was on, when it was dispatched and when it started. With ``--job-times``
the fairness scenarios write ``<scenario>_job_times.json`` next to the report:

    {"users": [user id, ...],
     "jobs": [[job id, user id, shard, dispatched_at, started_at, attempts, partition], ...]}

times in seconds since the epoch, in order of start (jobs never started last); the
partition is the jobs topic's that its last dispatch went to; the job id joins them to
workers' logs and traces. A scenario named twice in ``--only`` writes
``<scenario>_job_times-2.json`` for its second run, and so on.
"""

from __future__ import annotations

import json
from pathlib import Path

from tools.bench.scenario_stack import on_every_shard


def save_job_times(out: Path, scenario: str, users: list[int]) -> Path:
    """Write the times of every job of ``users``; the file's path."""
    jobs = on_every_shard(
        "SELECT id, user_id, shard_id, extract(epoch FROM dispatched_at)::float8,"
        " extract(epoch FROM started_at)::float8, attempts, dispatch_partition"
        " FROM jobs WHERE user_id = ANY(%(users)s)",
        {"users": users},
    )
    jobs.sort(key=lambda job: (job[4] is None, job[4] or 0.0))  # by start, never started last
    path = out / f"{scenario}_job_times.json"
    run = 1
    while path.exists():
        run += 1
        path = out / f"{scenario}_job_times-{run}.json"
    path.write_text(json.dumps({"users": users, "jobs": [list(job) for job in jobs]}))
    return path
