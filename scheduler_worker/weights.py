"""Users' ``job_weight`` as the scheduler sees it: read from the control database, cached.

An entry older than ``refresh_seconds`` is read again, so an admin's weight change
reaches dispatch within that time. A user who no longer exists keeps the default weight.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from jobsvc.accounts.models import DEFAULT_JOB_WEIGHT, User


class WeightBook:
    def __init__(
        self, *, refresh_seconds: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._refresh_seconds = refresh_seconds
        self._clock = clock
        self._entries: dict[int, tuple[float, float]] = {}  # user -> (weight, read at)

    def weights_for(self, user_ids: Iterable[int]) -> dict[int, float]:
        now = self._clock()
        wanted = list(user_ids)
        stale = [
            user
            for user in wanted
            if user not in self._entries or now - self._entries[user][1] >= self._refresh_seconds
        ]
        if stale:
            fresh = dict(User.objects.filter(pk__in=stale).values_list("pk", "job_weight"))
            for user in stale:
                self._entries[user] = (fresh.get(user, DEFAULT_JOB_WEIGHT), now)
        return {user: self._entries[user][0] for user in wanted}
