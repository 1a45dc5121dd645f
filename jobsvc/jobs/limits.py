"""Per-user limits on creating jobs (OWASP API4): unfinished jobs, and the create rate.

Both are checked on every create, the API's hot path (one database round trip), so
neither may add a query per create. Each API process keeps, per user:

- **A token bucket** for the create rate, holding ``rate x USER_CREATE_BURST_SECONDS``
  jobs (at least one full bulk) and refilling at ``rate`` jobs/s; a create takes one
  token per job. It is per process: a deployment of P API processes lets a user create
  up to P x rate jobs/s. Exact would need a counter every process shares, i.e. one more
  write per create to a common database; a per-process bucket costs a dict lookup and
  some arithmetic, and still bounds any one user to a known multiple.
- **A count of the user's unfinished jobs** (scheduled, queued, running), read from every
  shard and reused for ``USER_UNFINISHED_REFRESH_SECONDS``; the process adds the jobs it
  creates meanwhile. Finished jobs leave the count at the next refresh. Jobs other
  processes create show at the next refresh too, so a user can overshoot the cap by what
  the other processes admit in one refresh interval, at most (P - 1) x rate x refresh.
  Counting is bounded by the cap (each shard stops at cap + 1) and uses the due and
  in-flight indexes, so it costs O(cap) per user per refresh, never O(backlog) per
  create; and a count that took t seconds is reused for at least COUNT_REUSE_FACTOR x t
  (a user with 300,000 scheduled jobs took 0.1 s to count), so counting costs a process
  at most 5 % of its time whatever the users' backlogs. A counter kept
  exact by every status change (in the executor's and scheduler's writes) would make
  each of a user's jobs update one hot row per transition: contention at 10,000 jobs/s,
  for a limit whose purpose is an order of magnitude, not a precise quota.

The clock and the counting function are injected, so the logic is unit-tested alone.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from jobsvc import errors
from jobsvc.jobs import store
from jobsvc.sharding.shards import shard_aliases

MAX_TRACKED_USERS = 10_000  # users each process keeps state for; the least recent go first
# A user without an unfinished-jobs limit has their unfinished jobs counted (for GET
# /api/v1/me) up to this many per shard and kind, so that the count stays O(this).
USAGE_COUNT_LIMIT = 100_000
# A count that took t seconds is reused for at least this many times t: a user near a
# large cap costs each process at most 1/COUNT_REUSE_FACTOR of its time in counting.
COUNT_REUSE_FACTOR = 20


@dataclass(frozen=True)
class UserLimits:
    """One user's limits; 0 turns a limit off."""

    max_unfinished: int
    create_rate: float  # jobs per second, per API process

    @classmethod
    def of(cls, user) -> UserLimits:
        """The user's own values where set (the admin), the deployment's defaults elsewhere."""
        max_unfinished = getattr(user, "max_unfinished_jobs", None)
        create_rate = getattr(user, "create_rate_per_second", None)
        return cls(
            max_unfinished=settings.USER_MAX_UNFINISHED_JOBS
            if max_unfinished is None
            else max_unfinished,
            create_rate=settings.USER_CREATE_RATE_PER_SECOND
            if create_rate is None
            else create_rate,
        )


@dataclass
class _UserState:
    tokens: float
    refilled_at: float
    unfinished: int = 0
    count_until: float = -math.inf  # when the count must be read again
    counted_cap: int = -1  # the cap the count was made for (a changed cap counts again)


class CreateLimiter:
    """Admits or refuses a user's create of ``jobs`` jobs; see the module docstring."""

    def __init__(
        self,
        *,
        count_unfinished: Callable[[int, int], int],
        refresh_seconds: float,
        burst_seconds: float,
        min_burst: int,
        clock: Callable[[], float] = time.monotonic,
        max_users: int = MAX_TRACKED_USERS,
    ) -> None:
        self._count_unfinished = count_unfinished  # (user_id, stop_at) -> count, capped
        self._refresh_seconds = refresh_seconds
        self._burst_seconds = burst_seconds
        self._min_burst = min_burst
        self._clock = clock
        self._max_users = max_users
        self._users: OrderedDict[int, _UserState] = OrderedDict()
        self._lock = threading.Lock()

    def admit(self, *, user_id: int, limits: UserLimits, jobs: int) -> None:
        """Take ``jobs`` from the user's allowances, or raise TooManyRequests, taking none."""
        if limits.max_unfinished:
            self._refresh_count(user_id, limits.max_unfinished)
        with self._lock:
            state = self._state(user_id, limits)
            if limits.max_unfinished and state.unfinished + jobs > limits.max_unfinished:
                raise errors.UnfinishedJobsLimited(
                    f"Unfinished-jobs limit: you have {state.unfinished:,} scheduled, queued "
                    f"or running jobs and may have at most {limits.max_unfinished:,}; "
                    f"this request adds {jobs:,}. Wait for jobs to finish, or cancel some.",
                    retry_after=max(1, math.ceil(self._refresh_seconds)),
                )
            if limits.create_rate:
                self._take_tokens(state, limits.create_rate, jobs)
            state.unfinished += jobs

    def burst(self, rate: float) -> int:
        """The most jobs a user of this create rate may create at once: the bucket's size,
        in whole jobs."""
        return math.floor(max(rate * self._burst_seconds, self._min_burst))

    def unfinished(self, *, user_id: int, cap: int) -> int:
        """The user's unfinished jobs as this process knows them, counted for ``cap`` (each
        shard stops at ``cap + 1`` per kind), reused as ``admit`` reuses its counts."""
        self._refresh_count(user_id, cap)
        with self._lock:
            state = self._users.get(user_id)
            return 0 if state is None else state.unfinished

    def forget(self) -> None:
        """Drop every user's state (tests; a changed configuration)."""
        with self._lock:
            self._users.clear()

    def _refresh_count(self, user_id: int, cap: int) -> None:
        started = self._clock()
        with self._lock:
            state = self._users.get(user_id)
            if state is not None and state.counted_cap == cap and started < state.count_until:
                return
        count = self._count_unfinished(user_id, cap + 1)  # outside the lock: queries
        took = self._clock() - started
        count_until = started + max(self._refresh_seconds, COUNT_REUSE_FACTOR * took)
        with self._lock:
            state = self._users.get(user_id)
            if state is None:
                state = self._users[user_id] = _UserState(tokens=-1.0, refilled_at=started)
                self._evict()
            state.unfinished, state.count_until, state.counted_cap = count, count_until, cap

    def _state(self, user_id: int, limits: UserLimits) -> _UserState:
        state = self._users.get(user_id)
        if state is None:
            state = _UserState(tokens=-1.0, refilled_at=self._clock())
            self._users[user_id] = state
            self._evict()
        self._users.move_to_end(user_id)
        return state

    def _take_tokens(self, state: _UserState, rate: float, jobs: int) -> None:
        capacity = max(rate * self._burst_seconds, self._min_burst)
        now = self._clock()
        if state.tokens < 0:  # new to this process: a full bucket
            state.tokens = capacity
        else:
            state.tokens = min(capacity, state.tokens + (now - state.refilled_at) * rate)
        state.refilled_at = now
        if state.tokens < jobs:
            wait = max(1, math.ceil((jobs - state.tokens) / rate))
            raise errors.CreateRateLimited(
                f"Create-rate limit: at most {rate:g} jobs per second (bursts up to "
                f"{capacity:,.0f}); this request of {jobs:,} job(s) may be sent again in "
                f"{wait} s.",
                retry_after=wait,
            )
        state.tokens -= jobs

    def _evict(self) -> None:
        while len(self._users) > self._max_users:
            self._users.popitem(last=False)


def _count_unfinished_everywhere(user_id: int, stop_at: int) -> int:
    return sum(
        store.count_unfinished(alias, user_id=user_id, stop_at=stop_at) for alias in shard_aliases()
    )


create_limiter = CreateLimiter(
    count_unfinished=_count_unfinished_everywhere,
    refresh_seconds=settings.USER_UNFINISHED_REFRESH_SECONDS,
    burst_seconds=settings.USER_CREATE_BURST_SECONDS,
    min_burst=settings.MAX_BULK_JOBS,
)


def jobs_create_admit(*, user, jobs: int) -> None:
    """Admit the user's create of ``jobs`` jobs, or raise TooManyRequests naming the limit."""
    create_limiter.admit(user_id=user.pk, limits=UserLimits.of(user), jobs=jobs)


@dataclass(frozen=True)
class UserUsage:
    """A user's limits, and how much of them they use, as this API process knows it."""

    limits: UserLimits
    create_burst: int  # jobs one create may hold at most at once; 0 with no rate limit
    unfinished: int  # scheduled, queued and running jobs, counted as ``admit`` counts them
    unfinished_exact: bool  # False: counting stopped at the limit (or USAGE_COUNT_LIMIT)


def user_usage(*, user) -> UserUsage:
    """The user's limits and their unfinished jobs (see ``CreateLimiter.unfinished``)."""
    limits = UserLimits.of(user)
    cap = limits.max_unfinished or USAGE_COUNT_LIMIT
    unfinished = create_limiter.unfinished(user_id=user.pk, cap=cap)
    return UserUsage(
        limits=limits,
        create_burst=create_limiter.burst(limits.create_rate) if limits.create_rate else 0,
        unfinished=unfinished,
        unfinished_exact=unfinished <= cap,
    )
