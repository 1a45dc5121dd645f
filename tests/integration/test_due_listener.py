"""Jobs created due now wake the shard's scheduler through PostgreSQL (LISTEN/NOTIFY):
the API's notification reaches the listener of that shard, and only for jobs due now; a
listener whose connection the server ended listens again."""

from __future__ import annotations

import queue
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import connections
from django.utils import timezone

from jobsvc.jobs.due_now import notify_due_now
from jobsvc.sharding.shards import shard_alias
from scheduler_worker.due_listener import DueListener
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

SHARD = 1
AHEAD = 1.0  # seconds: the dispatch-ahead window


def row(user: int, *, shard: int = SHARD, due_in: float = 0.0) -> SimpleNamespace:
    """What notify_due_now reads of a created job's row."""
    return SimpleNamespace(
        user_id=user, shard_id=shard, due_at=timezone.now() + timedelta(seconds=due_in)
    )


def listener_pids() -> set[int]:
    with connections[shard_alias(SHARD)].cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'LISTEN%%'"
        )
        return {pid for (pid,) in cursor.fetchall()}


@pytest.fixture
def notified():
    users: queue.SimpleQueue[set[int]] = queue.SimpleQueue()
    listener = DueListener(
        shard_id=SHARD, alias=shard_alias(SHARD), on_due=users.put, retry_delay=0.1
    )
    listener.start()
    assert listener.listening.wait(10.0), "the listener did not connect"
    yield users
    listener.stop()
    assert listener.join(5.0)


def test_jobs_created_due_now_wake_their_shards_listener(notified):
    now = timezone.now()
    notify_due_now([row(5), row(6, due_in=3600.0), row(7, shard=SHARD + 1)], now=now, ahead=AHEAD)
    assert notified.get(timeout=5.0) == {5}  # not the job due later, nor another shard's
    notify_due_now([row(8, due_in=AHEAD / 2)], now=timezone.now(), ahead=AHEAD)
    assert notified.get(timeout=5.0) == {8}  # within the dispatch-ahead window


def test_a_listener_whose_connection_was_ended_listens_again(notified):
    wait_until(listener_pids, timeout=10.0, what="the listener's backend is seen")
    [old] = listener_pids()
    with connections[shard_alias(SHARD)].cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [old])
    wait_until(lambda: listener_pids() - {old}, timeout=10.0, what="the listener connected again")
    notify_due_now([row(9)], now=timezone.now(), ahead=AHEAD)
    assert notified.get(timeout=5.0) == {9}
