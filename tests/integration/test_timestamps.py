"""Timestamps read back from PostgreSQL are the instants written, aware, in UTC.

The backend (jobsvc.postgresql) reads timestamptz with psycopg's C loader instead of
Django's Python one; both must give the same datetimes, through the ORM and raw cursors.
"""

from __future__ import annotations

import datetime
from zoneinfo import ZoneInfo

import pytest
from django.db import connections

from jobsvc.sharding.shards import shard_alias

pytestmark = pytest.mark.django_db(databases="__all__")

INSTANTS = [
    datetime.datetime(2030, 1, 1, 0, 0, 0, 1, tzinfo=datetime.UTC),
    datetime.datetime(2026, 3, 29, 1, 30, 0, 999_999, tzinfo=ZoneInfo("Europe/Paris")),
    datetime.datetime(1999, 12, 31, 23, 59, 59, 500_000, tzinfo=ZoneInfo("America/New_York")),
]


@pytest.mark.parametrize("alias", ["default", shard_alias(0)])
def test_a_raw_query_gives_back_the_instant_in_utc(alias):
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT t FROM unnest(%s::timestamptz[]) WITH ORDINALITY AS u(t, n) ORDER BY n",
            [INSTANTS],
        )
        read = [row[0] for row in cursor.fetchall()]

    assert read == INSTANTS  # the same instants
    assert all(value.tzinfo is datetime.UTC for value in read)  # as Django's loader gives


def test_now_from_the_server_is_aware_and_in_utc():
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT now(), now()::text")
        now, text = cursor.fetchone()

    assert now.tzinfo is datetime.UTC
    assert now == datetime.datetime.fromisoformat(text)
