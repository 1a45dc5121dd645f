"""The jobs table carries only the indexes its queries use: each one costs every write."""

from __future__ import annotations

import pytest
from django.db import connections

from jobsvc.sharding.shards import shard_alias, shard_ids

pytestmark = pytest.mark.django_db(databases="__all__")


@pytest.mark.parametrize("shard_id", list(shard_ids()))
def test_the_primary_key_has_no_second_pattern_ops_index(shard_id):
    with connections[shard_alias(shard_id)].cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'jobs' AND indexdef LIKE %s",
            ["%(id varchar_pattern_ops)%"],
        )
        assert cursor.fetchall() == []


def test_a_prefix_search_on_the_id_still_uses_the_primary_key():
    with connections[shard_alias(0)].cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN SELECT id FROM jobs WHERE id LIKE '3MRf%'")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "jobs_pkey" in plan, plan
