"""Django's PostgreSQL backend, with a connection health check that needs no query,
timestamps parsed in C, and no reconnect on the way out of a failed transaction.

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

import datetime
import functools
import select

from django.db.backends.postgresql import base
from psycopg import adapt, pq
from psycopg.abc import Buffer
from psycopg.types.datetime import TimestamptzLoader

try:  # psycopg's C build (psycopg[binary]): its loader parses in C
    from psycopg_binary._psycopg import TimestamptzLoader as _ParsingLoader
except ImportError:  # the pure Python build: no faster parser to be had
    _ParsingLoader = TimestamptzLoader


class _UtcTimestamptzLoader(adapt.Loader):
    """timestamptz through psycopg's own parser (C in its binary build), in UTC sessions.

    Django registers a loader of its own (``BaseTzLoader``) that runs psycopg's Python
    parser and then sets the tzinfo: 3.8 µs a timestamp against 0.4 µs, and during a
    flood 13 % of an executor's CPU and 8 % of a scheduler's (py-spy), parsing the
    timestamps of claimed jobs. In a UTC session psycopg's parser already gives datetimes
    in ``datetime.UTC``, as Django's loader does. The C class cannot be subclassed, so
    each loader holds one and gives psycopg its bound ``load`` (the method below only
    completes the abstract class). ``timezone`` is what Django compares a connection's
    loader with before each cursor (``create_cursor``): it must say UTC, or Django puts
    its own loader back.
    """

    timezone = datetime.UTC

    def __init__(self, oid: int, context: adapt.AdaptContext | None = None) -> None:
        super().__init__(oid, context)
        self._parser = _ParsingLoader(oid, context)
        self.load = self._parser.load  # what psycopg calls: the parser's own, no hop

    def load(self, data: Buffer) -> datetime.datetime:
        return self._parser.load(data)


@functools.cache
def _with_fast_timestamps(template: adapt.AdaptersMap) -> adapt.AdaptersMap:
    adapters = adapt.AdaptersMap(template)
    adapters.register_loader("timestamptz", _UtcTimestamptzLoader)
    return adapters


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict:
        params = super().get_connection_params()
        # Django's session time zone is self.timezone_name; UTC unless configured otherwise.
        if self.timezone is datetime.UTC and self.timezone_name == "UTC":
            params["context"] = _with_fast_timestamps(params["context"])
        return params

    def set_autocommit(
        self, autocommit: bool, force_begin_transaction_with_broken_autocommit: bool = False
    ) -> None:
        """Leave a closed connection closed when autocommit is turned back on.

        ``atomic()`` ends by turning autocommit back on. When its rollback failed (the
        connection broke), Django has already closed the connection, and since Django 5.1
        ``close()`` forgets it, so turning autocommit on would first open a new one: to a
        server that stopped answering, a whole ``connect_timeout`` more before the caller
        hears of the failure (an executor cut off from a shard waited 3 s for its query's
        timeout, then 3 s more for this). A new connection starts in autocommit mode
        anyway (``connect()``), so with none open there is nothing to turn on.
        """
        if autocommit and self.connection is None and self.settings_dict["AUTOCOMMIT"]:
            return
        super().set_autocommit(autocommit, force_begin_transaction_with_broken_autocommit)

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
