"""Per-user limits on scheduling jobs (OWASP API4): unfinished jobs, the bytes they hold,
and the create rate.

They apply to whatever makes jobs unfinished or stores bytes: a create (one job or a
bulk), a retry of failed jobs (each is unfinished again, and takes from the create rate
like a new job), and a reschedule (it takes one unit of the create rate, and its new
message's growth counts against the bytes). A staff redrive is not limited.

All are checked on every create, the API's hot path (one database round trip), so none
may add a query per create. Each API process keeps, per user:

- **A token bucket** for the create rate, holding ``rate x USER_CREATE_BURST_SECONDS``
  jobs (at least one full bulk) and refilling at ``rate`` jobs/s; a create takes one
  token per job. It is per process: a deployment of P API processes lets a user create
  up to P x rate jobs/s. Exact would need a counter every process shares, i.e. one more
  write per create to a common database; a per-process bucket costs a dict lookup and
  some arithmetic, and still bounds any one user to a known multiple.
- **A count of the user's unfinished jobs** (scheduled, queued, running), and of the
  bytes they hold (message and handler parameters) when a byte limit applies, read from
  every shard and reused for ``USER_UNFINISHED_REFRESH_SECONDS``; the process adds what
  it admits meanwhile. Finished jobs leave the count at the next refresh. Jobs other
  processes create show at the next refresh too, so a user can overshoot a limit by what
  the other processes admit in one refresh interval, at most (P - 1) x rate x refresh.
  Counting is bounded by the cap (each shard stops at cap + 1 rows of each kind) and uses
  the due and in-flight indexes, so it costs O(cap) per user per refresh, never
  O(backlog) per create; and a count that took t seconds is reused for at least
  COUNT_REUSE_FACTOR x t (a user with 300,000 scheduled jobs took 0.1 s to count), so
  counting costs a process at most 5 % of its time whatever the users' backlogs. A
  counter kept exact by every status change (in the executor's and scheduler's writes)
  would make each of a user's jobs update one hot row per transition: contention at
  10,000 jobs/s, for a limit whose purpose is an order of magnitude, not a precise quota.

A refusal is a 429 whose RateLimit fields give the state of every limit that applied.
The clock and the counting function are injected, so the logic is unit-tested alone.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.conf import settings

from jobsvc import errors
from jobsvc.jobs import store
from jobsvc.jobs.specs import JobSpec
from jobsvc.rate_limits import QuotaState, seconds
from jobsvc.sharding.shards import shard_aliases

MAX_TRACKED_USERS = 10_000  # users each process keeps state for; the least recent go first
# A count that took t seconds is reused for at least this many times t: a user near a
# large cap costs each process at most 1/COUNT_REUSE_FACTOR of its time in counting.
COUNT_REUSE_FACTOR = 20
# Rows of each kind a count reads per shard when no cap on jobs says where to stop (only
# the byte limit applies, or GET /api/v1/me): a backlog larger than this is not all counted.
COUNT_STOP_WITHOUT_CAP = 1_000_000


@dataclass(frozen=True)
class UserLimits:
    """One user's limits; 0 turns a limit off."""

    max_unfinished: int
    create_rate: float  # jobs per second, per API process
    max_stored_bytes: int = 0  # bytes of messages and parameters of unfinished jobs

    @classmethod
    def of(cls, user) -> UserLimits:
        """The user's own values where set (the admin), the deployment's defaults elsewhere."""

        def own(name: str, default):
            value = getattr(user, name, None)
            return default if value is None else value

        return cls(
            max_unfinished=own("max_unfinished_jobs", settings.USER_MAX_UNFINISHED_JOBS),
            create_rate=own("create_rate_per_second", settings.USER_CREATE_RATE_PER_SECOND),
            max_stored_bytes=own("max_stored_bytes", settings.USER_MAX_STORED_BYTES),
        )


@dataclass(frozen=True)
class Usage:
    """What a user's unfinished jobs hold: how many, and their bytes (when counted)."""

    jobs: int
    stored_bytes: int = 0


@dataclass
class _UserState:
    tokens: float
    refilled_at: float
    unfinished: int = 0
    stored_bytes: int = 0
    count_until: float = -math.inf  # when the count must be read again
    counted_for: tuple[int, bool] = (-1, False)  # (stop_at, bytes): a changed limit counts again


class CreateLimiter:
    """Admits or refuses a user's create of ``jobs`` jobs; see the module docstring."""

    def __init__(
        self,
        *,
        count_unfinished: Callable[[int, int, bool], Usage],
        refresh_seconds: float,
        burst_seconds: float,
        min_burst: int,
        clock: Callable[[], float] = time.monotonic,
        max_users: int = MAX_TRACKED_USERS,
    ) -> None:
        # (user_id, stop_at, with_bytes) -> Usage, each kind of row counted up to stop_at
        self._count_unfinished = count_unfinished
        self._refresh_seconds = refresh_seconds
        self._burst_seconds = burst_seconds
        self._min_burst = min_burst
        self._clock = clock
        self._max_users = max_users
        self._users: OrderedDict[int, _UserState] = OrderedDict()
        self._lock = threading.Lock()

    def admit(
        self,
        *,
        user_id: int,
        limits: UserLimits,
        jobs: int,
        stored_bytes: int = 0,
        rate_units: int | None = None,
    ) -> None:
        """Take ``jobs`` new unfinished jobs holding ``stored_bytes`` bytes, and
        ``rate_units`` (default: ``jobs``) from the create rate, from the user's
        allowances; or raise TooManyRequests, taking nothing."""
        rate_units = jobs if rate_units is None else rate_units
        counts_bytes = bool(limits.max_stored_bytes)
        if limits.max_unfinished or counts_bytes:
            self._refresh_count(user_id, limits)
        with self._lock:
            state = self._state(user_id, limits)
            tokens = self._refilled(state, limits.create_rate) if limits.create_rate else 0.0
            quotas = self._quotas(state, limits, tokens)
            if limits.max_unfinished and state.unfinished + jobs > limits.max_unfinished:
                raise errors.UnfinishedJobsLimited(
                    f"Unfinished-jobs limit: you have {state.unfinished:,} scheduled, queued "
                    f"or running jobs and may have at most {limits.max_unfinished:,}; "
                    f"this request adds {jobs:,}. Wait for jobs to finish, or cancel some.",
                    retry_after=self._count_retry_after(),
                    quotas=quotas,
                )
            if counts_bytes and state.stored_bytes + stored_bytes > limits.max_stored_bytes:
                raise errors.StoredBytesLimited(
                    f"Stored-bytes limit: your unfinished jobs hold {state.stored_bytes:,} "
                    f"bytes of messages and parameters and may hold at most "
                    f"{limits.max_stored_bytes:,}; this request adds {stored_bytes:,}. Wait "
                    "for jobs to finish, or cancel some.",
                    retry_after=self._count_retry_after(),
                    quotas=quotas,
                )
            if limits.create_rate and rate_units:
                capacity = self.burst(limits)
                if rate_units > capacity:  # would never fit: no point in waiting
                    raise errors.InvalidInput(
                        f"This request would schedule {rate_units:,} jobs; at most "
                        f"{capacity:,} can be scheduled at once (the create-rate burst). "
                        "Narrow it (a filter on execute_at, for a retry)."
                    )
                self._take_tokens(state, limits.create_rate, tokens, rate_units, quotas)
            state.unfinished += jobs
            state.stored_bytes += stored_bytes

    def burst(self, limits: UserLimits) -> int:
        """The most jobs one request may take from the create rate: the bucket's size, in
        whole jobs (0: no rate limit)."""
        if not limits.create_rate:
            return 0
        return math.floor(max(limits.create_rate * self._burst_seconds, self._min_burst))

    def usage(self, *, user_id: int, limits: UserLimits) -> Usage:
        """The user's unfinished jobs (and their bytes, when limited) as this process knows
        them: counted, and reused, as ``admit`` counts them."""
        self._refresh_count(user_id, limits)
        with self._lock:
            state = self._users.get(user_id)
            return Usage(0) if state is None else Usage(state.unfinished, state.stored_bytes)

    def forget(self) -> None:
        """Drop every user's state (tests; a changed configuration)."""
        with self._lock:
            self._users.clear()

    def _refresh_count(self, user_id: int, limits: UserLimits) -> None:
        stop_at = limits.max_unfinished + 1 if limits.max_unfinished else COUNT_STOP_WITHOUT_CAP
        counted_for = (stop_at, bool(limits.max_stored_bytes))
        started = self._clock()
        with self._lock:
            state = self._users.get(user_id)
            fresh = state is not None and state.counted_for == counted_for
            if fresh and started < state.count_until:
                return
        usage = self._count_unfinished(user_id, *counted_for)  # outside the lock: queries
        took = self._clock() - started
        count_until = started + max(self._refresh_seconds, COUNT_REUSE_FACTOR * took)
        with self._lock:
            state = self._users.get(user_id)
            if state is None:
                state = self._users[user_id] = _UserState(tokens=-1.0, refilled_at=started)
                self._evict()
            state.unfinished, state.stored_bytes = usage.jobs, usage.stored_bytes
            state.count_until, state.counted_for = count_until, counted_for

    def _count_retry_after(self) -> int:
        return max(1, math.ceil(self._refresh_seconds))

    def _state(self, user_id: int, limits: UserLimits) -> _UserState:
        state = self._users.get(user_id)
        if state is None:
            state = _UserState(tokens=-1.0, refilled_at=self._clock())
            self._users[user_id] = state
            self._evict()
        self._users.move_to_end(user_id)
        return state

    def _refilled(self, state: _UserState, rate: float) -> float:
        """The user's tokens now (a user new to this process has a full bucket)."""
        capacity = max(rate * self._burst_seconds, self._min_burst)
        now = self._clock()
        if state.tokens < 0:
            state.tokens = capacity
        else:
            state.tokens = min(capacity, state.tokens + (now - state.refilled_at) * rate)
        state.refilled_at = now
        return state.tokens

    def _take_tokens(
        self,
        state: _UserState,
        rate: float,
        tokens: float,
        units: int,
        quotas: Sequence[QuotaState],
    ) -> None:
        capacity = max(rate * self._burst_seconds, self._min_burst)
        if tokens < units:
            wait = max(1, math.ceil((units - tokens) / rate))
            raise errors.CreateRateLimited(
                f"Create-rate limit: at most {rate:g} jobs per second (bursts up to "
                f"{capacity:,.0f}); this request of {units:,} job(s) may be sent again in "
                f"{wait} s.",
                retry_after=wait,
                quotas=quotas,
            )
        state.tokens -= units

    def _quotas(self, state: _UserState, limits: UserLimits, tokens: float) -> list[QuotaState]:
        """Each applying limit's state before this request (the RateLimit fields of a 429)."""
        quotas = []
        if limits.create_rate:
            capacity = max(limits.create_rate * self._burst_seconds, self._min_burst)
            quotas.append(
                QuotaState(
                    policy="create-rate",
                    quota=math.floor(capacity),
                    window=seconds(capacity / limits.create_rate),
                    remaining=math.floor(tokens),
                    reset=seconds((capacity - tokens) / limits.create_rate),
                )
            )
        if limits.max_unfinished:
            quotas.append(
                QuotaState(
                    policy="unfinished-jobs",
                    quota=limits.max_unfinished,
                    remaining=limits.max_unfinished - state.unfinished,
                )
            )
        if limits.max_stored_bytes:
            quotas.append(
                QuotaState(
                    policy="stored-bytes",
                    quota=limits.max_stored_bytes,
                    remaining=limits.max_stored_bytes - state.stored_bytes,
                    unit="content-bytes",
                )
            )
        return quotas

    def _evict(self) -> None:
        while len(self._users) > self._max_users:
            self._users.popitem(last=False)


def _count_unfinished_everywhere(user_id: int, stop_at: int, with_bytes: bool) -> Usage:
    jobs = stored_bytes = 0
    for alias in shard_aliases():
        count, size = store.count_unfinished(
            alias, user_id=user_id, stop_at=stop_at, with_bytes=with_bytes
        )
        jobs, stored_bytes = jobs + count, stored_bytes + size
    return Usage(jobs=jobs, stored_bytes=stored_bytes)


create_limiter = CreateLimiter(
    count_unfinished=_count_unfinished_everywhere,
    refresh_seconds=settings.USER_UNFINISHED_REFRESH_SECONDS,
    burst_seconds=settings.USER_CREATE_BURST_SECONDS,
    min_burst=settings.MAX_BULK_JOBS,
)


def stored_bytes_of(message: str, handler_params: dict) -> int:
    """The bytes a job holds against the limit: its message's UTF-8 and its parameters'
    JSON. (``str.isascii`` is O(1): an ASCII message's bytes are its length.)"""
    size = len(message) if message.isascii() else len(message.encode("utf-8", "surrogatepass"))
    if handler_params:
        size += len(json.dumps(handler_params, ensure_ascii=False, separators=(",", ":")))
    return size


def jobs_admit(*, user, jobs: int, stored_bytes: int = 0, rate_units: int | None = None) -> None:
    """Admit ``jobs`` new unfinished jobs of ``user`` holding ``stored_bytes``, taking
    ``rate_units`` (default ``jobs``) from the create rate; or raise TooManyRequests."""
    create_limiter.admit(
        user_id=user.pk,
        limits=UserLimits.of(user),
        jobs=jobs,
        stored_bytes=stored_bytes,
        rate_units=rate_units,
    )


def jobs_create_admit(*, user, specs: Sequence[JobSpec]) -> None:
    """Admit the user's create of these jobs, or raise TooManyRequests naming the limit."""
    limits = UserLimits.of(user)
    size = (
        sum(stored_bytes_of(spec.message, spec.handler_params) for spec in specs)
        if limits.max_stored_bytes
        else 0
    )
    create_limiter.admit(user_id=user.pk, limits=limits, jobs=len(specs), stored_bytes=size)


@dataclass(frozen=True)
class UserUsage:
    """A user's limits, and how much of them they use, as this API process knows it."""

    limits: UserLimits
    create_burst: int  # jobs one create may hold at most at once; 0 with no rate limit
    unfinished: int  # scheduled, queued and running jobs, counted as ``admit`` counts them
    unfinished_exact: bool  # False: counting stopped (past the limit, or at COUNT_STOP_...)
    stored_bytes: int | None  # what they hold; None when bytes are not limited (not counted)


def user_usage(*, user) -> UserUsage:
    """The user's limits and what they use of them (see ``CreateLimiter.usage``)."""
    limits = UserLimits.of(user)
    usage = create_limiter.usage(user_id=user.pk, limits=limits)
    counted_to = limits.max_unfinished or COUNT_STOP_WITHOUT_CAP - 1
    return UserUsage(
        limits=limits,
        create_burst=create_limiter.burst(limits),
        unfinished=usage.jobs,
        unfinished_exact=usage.jobs <= counted_to,
        stored_bytes=usage.stored_bytes if limits.max_stored_bytes else None,
    )
