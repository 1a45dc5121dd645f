"""Users' ``job_weight`` as the scheduler sees it: read from the control database, cached.

An entry older than ``refresh_seconds`` is read again, so an admin's weight change
reaches dispatch within that time. A user who no longer exists keeps the default weight.

Dispatch does not stop when the control database does (a restart, a failover): while it
cannot be read, known users keep the weight last read and new ones get the default, and
it is tried again ``refresh_seconds`` later. Fair share is then approximate for users
seen for the first time; no shard waits for the control database.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable

from django.db import DEFAULT_DB_ALIAS, connections
from django.db import Error as DatabaseError

from jobsvc.accounts.models import DEFAULT_JOB_WEIGHT, User

logger = logging.getLogger(__name__)


def weight_of(weights: dict[int, float], user: int) -> float:
    """``user``'s weight in ``weights``; the default weight if it is missing, or not a
    positive, finite number (the accounts refuse such weights; a share must never be
    computed from one)."""
    weight = weights.get(user, DEFAULT_JOB_WEIGHT)
    return weight if math.isfinite(weight) and weight > 0 else DEFAULT_JOB_WEIGHT


class WeightBook:
    def __init__(self, *, refresh_seconds: float, clock: Callable[[], float]) -> None:
        self._refresh_seconds = refresh_seconds
        self._clock = clock
        self._entries: dict[int, tuple[float, float]] = {}  # user -> (weight, read at)
        self._unreadable_until = float("-inf")  # no read before this, after a failed one

    def weights_for(self, user_ids: Iterable[int]) -> dict[int, float]:
        now = self._clock()
        wanted = list(user_ids)
        stale = [
            user
            for user in wanted
            if user not in self._entries or now - self._entries[user][1] >= self._refresh_seconds
        ]
        if stale and now >= self._unreadable_until:
            try:
                fresh = dict(User.objects.filter(pk__in=stale).values_list("pk", "job_weight"))
            except DatabaseError as exc:
                logger.warning(
                    "cannot read users' weights (last known ones apply for %.0f s): %s",
                    self._refresh_seconds,
                    exc,
                )
                # This thread's connection may be the broken one; a new one next time.
                connections[DEFAULT_DB_ALIAS].close()
                self._unreadable_until = now + self._refresh_seconds
            else:
                for user in stale:
                    self._entries[user] = (fresh.get(user, DEFAULT_JOB_WEIGHT), now)
        return {user: self._entries.get(user, (DEFAULT_JOB_WEIGHT, now))[0] for user in wanted}
