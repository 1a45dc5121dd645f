"""Counting a user's unfinished jobs (the per-user cap) never reads their finished jobs.

The cap is checked against this count, so its cost must not grow with the jobs the
retention keeps: the property pinned here is the pages the count touches.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from jobsvc.jobs import store
from jobsvc.jobs.specs import JobSpec
from jobsvc.sharding.ids import new_job_id
from jobsvc.sharding.shards import shard_alias

pytestmark = pytest.mark.django_db(databases="__all__")

SHARD = 3
ALIAS = shard_alias(SHARD)
USER = 777_001
FINISHED = 20_000


def _insert(count: int, status: str) -> None:
    now = timezone.now()
    spec = JobSpec(
        message="m", execute_at=now + timedelta(hours=1), max_attempts=3, timeout_seconds=30.0
    )
    rows = [
        store.new_job_row(
            job_id=new_job_id(shard_id=SHARD, at=now),
            user_id=USER,
            spec=spec,
            shard_id=SHARD,
            now=now,
        )._replace(status=status)
        for _ in range(count)
    ]
    store.insert_jobs(ALIAS, rows)


def _pages_touched(sql: str, params: dict) -> int:
    with connections[ALIAS].cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    top = plan[0]["Plan"]
    return top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)


def test_the_count_is_of_scheduled_queued_and_running_jobs_only():
    for status, count in [
        ("scheduled", 4),
        ("queued", 2),
        ("running", 1),
        ("succeeded", 3),
        ("failed", 2),
        ("cancelled", 1),
    ]:
        _insert(count, status)

    assert store.count_unfinished(ALIAS, user_id=USER, stop_at=100) == 7
    assert store.count_unfinished(ALIAS, user_id=USER, stop_at=3) == 3 + 3


def test_the_count_touches_few_pages_however_many_finished_jobs_the_user_has():
    _insert(5, "scheduled")
    _insert(2, "running")
    _insert(FINISHED, "succeeded")
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("ANALYZE jobs")

    pages = _pages_touched(store._COUNT_UNFINISHED, {"user_id": USER, "stop_at": 1_000_001})

    # 20,000 finished rows fill well over 200 heap pages; the count reads a few index pages.
    assert pages < 50, pages
