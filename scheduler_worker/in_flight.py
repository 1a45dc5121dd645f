"""A shard's jobs in flight (published, not finished yet), per user, and their limit.

``ShardInFlight`` keeps the count a dispatcher goes by: how much room the shard's limit
leaves (``room``), each user's room under its weighted share of it (``rooms``), and each
due user's jobs in flight (``counts``; ``idle``: those with none).

``InFlightLimit`` is an experimental limit below the fixed cap (off by default,
``JOBSVC_SCHEDULER_TARGET_QUEUE_WAIT_SECONDS``): it follows the queue. A job published
to Kafka waits behind every message already in its partition (FIFO), and every executor
reads all partitions, so a job that just became due waits about as long as the oldest
message still waiting, whoever it belongs to. A fixed cap per shard
(``JOBSVC_SCHEDULER_MAX_IN_FLIGHT_PER_SHARD``) bounds that wait only by the rate:
four shards' 20,000 jobs at 16,000 jobs/s are 1.25 s, and seconds when executors are busy.

`InFlightLimit` keeps the wait near ``target_wait`` instead, by the delay it sees (as TCP
Vegas and LEDBAT do): the age of the shard's oldest *queued* job (published, not started
by an executor yet). Older than the target: the limit shrinks by ``DECREASE``, at most
once per ``target_wait`` (the queue needs that long to show the effect). Younger than
half the target: it grows by ``step`` per update, up to ``ceiling``. In between it holds.

Executors never starve for it: a queue older than the target is a queue, and while they
keep up, queued jobs are young and the limit climbs back to the ceiling. ``floor`` keeps a
round's worth of jobs in flight whatever the queue says.
"""

from __future__ import annotations

import math
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable

from scheduler_worker import metrics
from scheduler_worker.fair_share import weight_of
from scheduler_worker.shard_store import ClaimedJob, ShardStore

DECREASE = 0.8  # factor applied to the limit when the queue is older than the target
# Seconds between counts of the shard's in-flight jobs (see ShardInFlight.total).
IN_FLIGHT_RECOUNT_INTERVAL = 0.25
# Users with at most this many jobs in flight on the shard have them listed by id, so
# that ``ShardInFlight.counts`` can see between counts that they finished.
LISTED_IN_FLIGHT = 4


class InFlightLimit:
    def __init__(
        self,
        *,
        ceiling: int,
        floor: int,
        target_wait: float,
        step: int,
        clock: Callable[[], float],
    ) -> None:
        if not 0 < floor <= ceiling:
            raise ValueError(f"need 0 < floor <= ceiling, got {floor} and {ceiling}")
        self.ceiling = ceiling
        self.floor = floor
        self.target_wait = target_wait  # seconds
        self.step = step  # jobs added per update while the queue is young
        self._clock = clock
        self.limit = ceiling
        self._last_decrease = float("-inf")

    def update(self, *, oldest_queued_age: float | None) -> int:
        """The limit now, given the age in seconds of the oldest queued job (None: none)."""
        now = self._clock()
        age = oldest_queued_age or 0.0
        if age > self.target_wait:
            if now - self._last_decrease >= self.target_wait:
                self.limit = max(self.floor, int(self.limit * DECREASE))
                self._last_decrease = now
        elif age < self.target_wait / 2:
            self.limit = min(self.ceiling, self.limit + self.step)
        return self.limit


class ShardInFlight:
    """One shard's jobs in flight per user, and the room its limit leaves.

    ``max_in_flight`` 0: no limit, and every user has a whole batch of room. ``limit``
    (an ``InFlightLimit``), if given, follows the queue below ``max_in_flight``.
    The shard's dispatch thread owns it; ``counts`` and ``claimed`` may also be called
    from the shard's due listener (scheduler_worker.due_listener), under ``_lock``.
    """

    def __init__(
        self,
        *,
        store: ShardStore,
        max_in_flight: int,
        batch_size: int,
        clock: Callable[[], float],
        limit: InFlightLimit | None = None,
    ) -> None:
        self.store = store
        self.max_in_flight = max_in_flight
        self.batch_size = batch_size
        self._clock = clock
        self._adaptive = limit
        self._label = str(store.shard_id)
        self._by_user: Counter[int] = Counter()  # as last counted, plus claimed since
        # Users with few jobs in flight (LISTED_IN_FLIGHT): which ones, as last counted,
        # plus claimed since; only while every one of them is known.
        self._listed: dict[int, set[str]] = {}
        self._recount_at = -math.inf  # clock time of the next count
        self._limit = max_in_flight  # the limit as of the last ``room``
        self._lock = threading.Lock()  # over _by_user, _listed and _reserved
        self._reserved = 0  # room held by claims running (``reserve``)

    def room(self) -> float:
        """Jobs the shard's limit leaves room for (0 or less: none; no limit: infinite)."""
        if not self.max_in_flight:
            return math.inf
        limit = self.max_in_flight
        if self._adaptive is not None:
            limit = self._adaptive.update(oldest_queued_age=self.store.oldest_queued_age())
        metrics.IN_FLIGHT_LIMIT.labels(self._label).set(limit)
        self._limit = limit
        return limit - self.total()

    def worth_a_round(self, size: int) -> float:
        """Room below which a round of ``size`` waits: half of it, or of the limit."""
        if not self.max_in_flight:
            return 0
        return min(size, self._limit) / 2

    def reserve(self, jobs: float) -> float:
        """Hold up to ``jobs`` of the room left (the limit as of the last ``room``, less the
        jobs in flight and those held already) for a claim about to run; how many were
        held (no limit: all). The dispatch round and the due listener
        (scheduler_worker.due_listener) claim side by side: each holds what it may claim
        until ``claimed`` counts it and ``release`` lets the hold go, so that the two do
        not take the same room."""
        if not self.max_in_flight:
            return jobs
        total = self.total()
        with self._lock:
            granted = int(max(0, min(jobs, self._limit - total - self._reserved)))
            self._reserved += granted
            return granted

    def release(self, jobs: float) -> None:
        """Let go of a hold from ``reserve`` (after ``claimed`` counted what it took)."""
        if self.max_in_flight and jobs:
            with self._lock:
                self._reserved -= int(jobs)

    def total(self) -> int:
        """The shard's jobs in flight: counted at most every ``IN_FLIGHT_RECOUNT_INTERVAL``,
        and in between, the last count plus the jobs claimed since.

        The count reads every queued and running row (10,000 per shard at the default
        limit); run every round, it was the shards' costliest statement during a flood
        (37 % of the samples of active statements in tools/bench fairness_many_users).
        Between counts the jobs executors finished are not seen, so the limit is never
        passed, and what they freed is claimed at the next count, in one larger round.
        """
        now = self._clock()
        if now >= self._recount_at:
            counted = self.store.in_flight_by_user(listed=LISTED_IN_FLIGHT)
            by_user = Counter({user: count for user, (count, _) in counted.items()})
            with self._lock:
                self._by_user = by_user
                self._listed = {user: set(ids) for user, (count, ids) in counted.items() if ids}
            self._recount_at = now + IN_FLIGHT_RECOUNT_INTERVAL
            metrics.IN_FLIGHT.labels(self._label).set(by_user.total())
        with self._lock:  # the due listener may be adding a user
            return self._by_user.total()

    def rooms(self, users: Iterable[int], weights: dict[int, float]) -> dict[int, int]:
        """Per due user: how many more of its jobs may be in flight before it passes its
        weighted share of the shard's limit (at least one job), as of the last ``room``.

        Executors start the jobs they hold in weighted fair order across users
        (executor_worker.fair_buffer), so what a user gets is decided there, as long as
        every backlogged user has jobs held. When capacity is short, users below their share
        go first: otherwise the jobs of users who start slowly, because others outweigh them
        on other shards, would fill the limit, and a heavier user whose jobs sit on few
        shards would run dry in the executors while still backlogged. Capacity those users
        cannot use still goes to the others (``ShardRounds._claim_fairly``): this
        orders, it does not throttle. (No limit: no per-user one either.)
        """
        users = list(users)
        if not self.max_in_flight:
            return dict.fromkeys(users, self.batch_size)
        total = sum(weight_of(weights, user) for user in users)
        return {
            user: max(1, math.ceil(self._limit * weight_of(weights, user) / total))
            - self._by_user.get(user, 0)
            for user in users
        }

    def counts(self, users: Iterable[int]) -> dict[int, int]:
        """Each user's jobs in flight on the shard, in the order given: as last counted,
        plus claimed since; for a user with a few, all of them listed, those of them
        still in flight now (one query for all such users).

        Between two counts, the count does not see jobs finish, and a user whose one job
        finished just after a count would be seen idle only at the next, up to
        ``IN_FLIGHT_RECOUNT_INTERVAL`` later (at the in-flight limit a job created due
        now would wait for it, and go to the jobs topic rather than the express topic:
        scheduler_worker.express_lane). What the lookup finds changes only these answers,
        not the room (``room``, ``rooms``): that is every user's as last counted, or a
        user with few jobs in flight, seen finishing them, would be given the room of the
        others, whose finished jobs are seen only at the next count (a weight-1 user got
        0.41 of the dispatches instead of 0.2 beside a weight-4 user, at a limit of 20 a
        shard: tests/e2e/test_scheduler_fairness.py)."""
        users = list(users)
        with self._lock:
            counts = {user: self._by_user.get(user, 0) for user in users}
            listed = {
                user: set(self._listed[user])
                for user, count in counts.items()
                if count > 0 and len(self._listed.get(user, ())) == count
            }
        if listed:
            job_ids = [job_id for ids in listed.values() for job_id in ids]
            still = self.store.still_in_flight(job_ids)
            for user, ids in listed.items():
                counts[user] = len(ids & still)
        return counts

    @staticmethod
    def idle(counts: dict[int, int]) -> list[int]:
        """The users of ``counts`` with no job in flight, in its order."""
        return [user for user, count in counts.items() if count <= 0]

    def claimed(self, jobs: Iterable[ClaimedJob]) -> None:
        """Count jobs just claimed, until the next count sees them."""
        if not self.max_in_flight:
            return
        claimed: dict[int, list[str]] = defaultdict(list)
        for job in jobs:
            claimed[job.user_id].append(job.job_id)
        with self._lock:
            for user, job_ids in claimed.items():
                listed = self._listed.pop(user, set())
                all_listed = len(listed) == self._by_user[user]
                self._by_user[user] += len(job_ids)
                if all_listed and self._by_user[user] <= LISTED_IN_FLIGHT:
                    self._listed[user] = listed.union(job_ids)
