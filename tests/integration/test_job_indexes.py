"""The jobs table carries only the indexes its queries use: each one costs every write."""

from __future__ import annotations

import json

import pytest
from django.db import connections

from jobsvc.sharding.shards import shard_alias, shard_ids
from tests.integration.plans import explain

pytestmark = pytest.mark.django_db(databases="__all__")


@pytest.mark.parametrize("shard_id", list(shard_ids()))
def test_the_primary_key_has_no_second_pattern_ops_index(shard_id):
    with connections[shard_alias(shard_id)].cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'jobs' AND indexdef LIKE %s",
            ["%(id varchar_pattern_ops)%"],
        )
        assert cursor.fetchall() == []


def test_a_prefix_search_on_the_id_reads_only_the_matching_part_of_an_index():
    """The admin's search by id prefix stays cheap however many jobs the shard holds.

    What matters is the cost, not which index the planner picks: 20,000 jobs, 16 of them
    matching, and the search touches a handful of pages (a scan of the table or of a whole
    index would touch well over a hundred).
    """
    with connections[shard_alias(0)].cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO jobs (id, user_id, message, execute_at, due_at, status, attempts,
                              max_attempts, timeout_seconds, handler, handler_params,
                              shard_id, last_error, attempt_errors, created_at, updated_at)
            SELECT lpad(to_hex(n), 27, '0'), n % 50, 'm', now(), now(), 'scheduled', 0,
                   3, 30, 'default', '{}', 0, '', '[]', now(), now()
              FROM generate_series(1, 20000) AS n
            """
        )
        cursor.execute("ANALYZE jobs")
        plan = explain(
            cursor,
            "SELECT id FROM jobs WHERE id LIKE %s",
            ["000000000000000000000001f0%"],
            buffers=True,
        )
    root = plan[0]["Plan"]

    assert root["Actual Rows"] == 16
    pages = root["Shared Hit Blocks"] + root["Shared Read Blocks"]
    assert pages <= 10, json.dumps(root, indent=1)
