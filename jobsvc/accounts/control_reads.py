"""Per-user reads of the control database that executors make while running a job.

A delivery needs its owner's signing secrets (``webhook_secrets``) or topic grants
(``kafka_topics``). Those live in the control database, which a job's own shard does not
depend on; a cut session or a restart of the control server must not fail the job's
attempts. So ``cached_read``:

- serves a fresh cached value without a query;
- on a database error, closes this thread's broken connection and reads once more (a cut
  session is then a new connection, not a failed attempt);
- while the server stays unreachable, serves the last value it read, however old (the
  grants and secrets of a moment ago are the right ones to keep delivering with), and
  keeps it for another USER_HANDLER_CACHE_SECONDS: one read per user and period, not one
  per delivery, may wait for a connect timeout on a cut network;
- raises the error only for a user it never read. The executors' handlers read through
  ``before_start``, which makes that error ``NotStarted``: the job did not start, and is
  due again without spending an attempt. (The API's reads answer 503 instead.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import TypeVar

from django.conf import settings
from django.db import DatabaseError, connections

from jobsvc.accounts.authentication import ExpiringCache
from jobsvc.handlers.errors import NotStarted

logger = logging.getLogger(__name__)

T = TypeVar("T")


def cached_read(cache: ExpiringCache, key: Hashable, load: Callable[[], T]) -> T:
    """``load()``'s value for ``key``, cached for USER_HANDLER_CACHE_SECONDS (see above)."""
    hit, value = cache.get(key)
    if hit:
        return value
    try:
        value = _load_reconnecting(load)
    except DatabaseError as exc:
        found, value = cache.stale(key)
        if not found:
            raise
        logger.warning("control database unreachable, using %r as last read: %s", key, exc)
    cache.put(key, value, expires_at=cache.now() + settings.USER_HANDLER_CACHE_SECONDS)
    return value


def before_start(read: Callable[[int], T]) -> Callable[[int], T]:
    """``read`` (of a user's id) for a handler about to run a job: a control database it
    cannot reach means the job did not start (``NotStarted``), not that the job failed."""

    def read_before_start(user_id: int) -> T:
        try:
            return read(user_id)
        except DatabaseError as exc:
            raise NotStarted(f"the control database is out of reach: {exc}") from exc

    return read_before_start


def _load_reconnecting(load: Callable[[], T]) -> T:
    try:
        return load()
    except DatabaseError:
        connections["default"].close()  # this thread's; the next query opens a new one
        return load()
