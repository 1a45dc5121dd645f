"""Counting a user's unfinished jobs (the per-user cap) never reads their finished jobs.

The cap is checked against this count, so its cost must not grow with the jobs the
retention keeps: the property pinned here is the pages the count touches.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from jobsvc.jobs import store
from jobsvc.jobs.specs import JobSpec
from jobsvc.sharding.ids import new_job_id
from jobsvc.sharding.shards import shard_alias
from tests.integration.plans import explain

pytestmark = pytest.mark.django_db(databases="__all__")

SHARD = 3
ALIAS = shard_alias(SHARD)
USER = 777_001
FINISHED = 20_000


def _insert(count: int, status: str, message: str = "m") -> None:
    now = timezone.now()
    spec = JobSpec(
        message=message, execute_at=now + timedelta(hours=1), max_attempts=3, timeout_seconds=30.0
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
        plan = explain(cursor, sql, params, buffers=True)
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

    assert store.count_unfinished(ALIAS, user_id=USER, stop_at=100) == (7, 0)
    assert store.count_unfinished(ALIAS, user_id=USER, stop_at=3) == (3 + 3, 0)


def test_the_bytes_are_those_of_the_unfinished_jobs_messages_and_parameters():
    _insert(3, "scheduled", message="x" * 1000)
    _insert(1, "running", message="\u00e9" * 100)  # 200 bytes of UTF-8
    _insert(5, "succeeded", message="y" * 10_000)

    count, size = store.count_unfinished(ALIAS, user_id=USER, stop_at=100, with_bytes=True)

    assert count == 4
    assert size == 3 * 1000 + 200 + 4 * _stored_size_of_empty_params()


def _stored_size_of_empty_params() -> int:
    """What one job's empty handler_params take in its row (a short header in a row)."""
    with connections[ALIAS].cursor() as cursor:
        cursor.execute(
            "SELECT pg_column_size(handler_params) FROM jobs WHERE user_id = %s LIMIT 1", [USER]
        )
        return cursor.fetchone()[0]


def test_the_count_touches_few_pages_however_many_finished_jobs_the_user_has():
    _insert(5, "scheduled")
    _insert(2, "running")
    _insert(FINISHED, "succeeded")
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("ANALYZE jobs")

    params = {"user_id": USER, "stop_at": 1_000_001}
    pages = _pages_touched(store._COUNT_UNFINISHED, params)
    with_bytes = _pages_touched(store._COUNT_UNFINISHED_BYTES, params)

    # 20,000 finished rows fill well over 200 heap pages; the count reads a few index pages
    # (and, for the bytes, the pages of the 7 unfinished rows).
    assert pages < 50, pages
    assert with_bytes < 50, with_bytes
