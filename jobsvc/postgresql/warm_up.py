"""A thread's database connections, opened before its first job needs them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from django.db import DatabaseError, connections


def open_connections(aliases: Iterable[str]) -> None:
    """Open the calling thread's connection to each database of ``aliases`` now.

    Django opens a thread's connection on its first query: for a thread that waits for
    rare, urgent work (a job due now), that first query would carry the new connection's
    start-up and authentication, on a saturated CPU under a flood. A database that is down
    is skipped: its connection is made on first use, as always.
    """
    for alias in aliases:
        with contextlib.suppress(DatabaseError):
            connections[alias].ensure_connection()
