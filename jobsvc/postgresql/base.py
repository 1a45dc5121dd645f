"""Django's PostgreSQL backend, with a connection health check that needs no query.

Kept connections (`CONN_MAX_AGE`) are checked once per request before their first use
(`CONN_HEALTH_CHECKS`). Django checks with `SELECT 1`: one more round trip than the work
itself for a request that makes one query, such as a job create (its PostgreSQL backend
wakes twice, and on a busy 2-core machine each wake-up waits for a core).

This check asks the socket instead. An idle connection has nothing to read: the server
speaks only when asked (no LISTEN is used here). When PostgreSQL ends a session (a
restart, `pg_terminate_backend`, `idle_session_timeout`) it sends a FATAL error and closes
the socket, so the socket turns readable, and the connection is dropped before use, as
urllib3 does with pooled HTTP connections. A peer that vanished without a word (a cable
pulled) still passes; `SELECT 1` would hang on it just as the real query does.
"""

from __future__ import annotations

import select

from django.db.backends.postgresql import base
from psycopg import pq


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        connection = self.connection
        # Not OK covers closed and broken (psycopg derives both from the status).
        if connection is None or connection.pgconn.status != pq.ConnStatus.OK:
            return False
        return not _has_unread_data(connection.fileno())


def _has_unread_data(fileno: int) -> bool:
    """Whether the server sent anything, or closed the socket, without being asked."""
    try:
        poller = select.poll()
        poller.register(fileno, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True  # no socket to speak of: treat it as gone
