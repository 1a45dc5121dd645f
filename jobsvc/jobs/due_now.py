"""Telling a shard's scheduler at once about jobs created due now (PostgreSQL NOTIFY).

A scheduler finds due jobs in rounds: back to back while a flood is dispatched, each a
claim of a thousand jobs and their publishing, 100-250 ms on a busy machine. A job
created due now during another user's flood waited for the round in progress and then for
its own: 100-290 ms from its creation to its claim (tools/bench light_user_due_now).

So once jobs due within the dispatch-ahead window (JOBSVC_SCHEDULER_DISPATCH_AHEAD_SECONDS)
are committed, the API sends a notification on ``CHANNEL`` in their shard's database,
with the user's id as payload. The scheduler that owns the shard listens
(scheduler_worker.due_listener) and sends the jobs of such a user with few in flight to
the express topic at once, beside its rounds. A notification is only a hint: one that is
lost (no scheduler listening, a reconnect, a failed notify) leaves the jobs to the next
round, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import Error as DatabaseError
from django.db import connections

from jobsvc.jobs.store import JobRow
from jobsvc.sharding.shards import shard_alias

logger = logging.getLogger(__name__)

CHANNEL = "jobsvc_jobs_due"


def notify_due_now(rows: Iterable[JobRow], *, now: datetime, ahead: float) -> None:
    """After ``rows`` were committed: notify each shard where one of them is due within
    ``ahead`` seconds of ``now``. Inside a caller's transaction nothing is sent (an error
    would end that transaction, and the next round finds the jobs anyway)."""
    horizon = now + timedelta(seconds=ahead)
    due: dict[int, set[int]] = {}
    for row in rows:
        if row.due_at <= horizon:
            due.setdefault(row.shard_id, set()).add(row.user_id)
    for shard_id, users in due.items():
        connection = connections[shard_alias(shard_id)]
        if connection.in_atomic_block:
            continue
        try:
            with connection.cursor() as cursor:
                for user_id in sorted(users):
                    cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, str(user_id)])
        except DatabaseError as exc:  # committed already: the next round finds them
            logger.info("shard %s: cannot notify the scheduler of due jobs: %s", shard_id, exc)


def users_notified(payloads: Iterable[str]) -> set[int]:
    """The user ids in notifications' payloads; anything else is ignored."""
    users = set()
    for payload in payloads:
        try:
            users.add(int(payload))
        except ValueError:
            logger.warning("ignoring a due-jobs notification with payload %r", payload[:100])
    return users
