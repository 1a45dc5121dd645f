"""The jobs a load-generator run created, and what became of the due ones.

Observing must cost the system little, however many jobs the run created, so the tracker
never scans: it keeps every created job's ``(execute_at, id)`` in a heap, moves the ones
that fell due into a watch list, and each observation looks up only watched jobs, by
primary key, one query per shard (the shard is in the id). A job leaves the watch list
once it is terminal. If the watch list grows past ``lookup_limit`` (the system is far
behind), each observation looks at that many, rotating, so every job is seen in turn.

The lookup is injected (``tools.loadgen.database.lookup_jobs`` reads the shards through
the ORM); times are Unix seconds.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

# Statuses after which a job never changes again (jobsvc.jobs.models.TERMINAL_STATUSES;
# the tests check the two agree). "missing": the job is no longer in its shard.
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
EXECUTED = frozenset({"succeeded", "failed"})  # the terminal statuses of a job that ran
MISSING = "missing"
LOOKUP_LIMIT = 50_000  # watched jobs looked up per observation, at most


@dataclass(frozen=True)
class JobState:
    id: str
    status: str
    dispatched_at: float | None
    started_at: float | None
    finished_at: float | None


# (shard, job ids) -> the states of those of them that exist.
Lookup = Callable[[int, list[str]], Iterable[JobState]]


@dataclass
class Observation:
    dispatched: int = 0  # jobs first seen dispatched (or already past it)
    statuses: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # newly final
    started_lateness: list[float] = field(default_factory=list)  # seconds, executed jobs
    finished_lateness: list[float] = field(default_factory=list)

    @property
    def executed(self) -> int:
        return self.statuses.get("succeeded", 0) + self.statuses.get("failed", 0)


@dataclass
class _Watched:
    execute_at: float
    shard: int
    dispatched_seen: bool = False


class JobTracker:
    """Thread-safe for ``add`` (senders) against ``observe`` (the observer thread)."""

    def __init__(self, *, shard_of: Callable[[str], int], lookup_limit: int = LOOKUP_LIMIT) -> None:
        self._shard_of = shard_of
        self._lookup_limit = lookup_limit
        self._pending: list[tuple[float, str]] = []  # heap by execute_at: not yet due
        self._watch: OrderedDict[str, _Watched] = OrderedDict()  # due, not yet terminal
        self._lock = threading.Lock()

    def add(self, jobs: Iterable[tuple[str, float]]) -> None:
        """Track new jobs, given as ``(id, execute_at)``."""
        with self._lock:
            for job_id, execute_at in jobs:
                heapq.heappush(self._pending, (execute_at, job_id))

    def observe(self, *, now: float, lookup: Lookup) -> Observation:
        """Look up the jobs due by ``now`` that were not terminal at the last look."""
        self.move_due(now)
        batch = list(itertools.islice(self._watch.items(), self._lookup_limit))
        by_shard: dict[int, list[str]] = defaultdict(list)
        for job_id, watched in batch:
            by_shard[watched.shard].append(job_id)
        found: dict[str, JobState] = {}
        for shard, ids in sorted(by_shard.items()):
            found.update((state.id, state) for state in lookup(shard, ids))
        observation = Observation()
        for job_id, watched in batch:
            self._account(job_id, watched, found.get(job_id), observation)
        return observation

    def move_due(self, now: float) -> None:
        """Count the jobs due by ``now`` as backlog (``observe`` does this first)."""
        with self._lock:
            while self._pending and self._pending[0][0] <= now:
                execute_at, job_id = heapq.heappop(self._pending)
                self._watch[job_id] = _Watched(execute_at, self._shard_of(job_id))

    def _account(
        self, job_id: str, watched: _Watched, state: JobState | None, observation: Observation
    ) -> None:
        if state is None:
            del self._watch[job_id]
            observation.statuses[MISSING] += 1
            return
        if not watched.dispatched_seen and (
            state.dispatched_at is not None or state.status in EXECUTED
        ):
            watched.dispatched_seen = True
            observation.dispatched += 1
        if state.status not in TERMINAL:
            self._watch.move_to_end(job_id)  # rotate: the next look starts with others
            return
        del self._watch[job_id]
        observation.statuses[state.status] += 1
        if state.status != "cancelled":
            if state.started_at is not None:
                observation.started_lateness.append(state.started_at - watched.execute_at)
            if state.finished_at is not None:
                observation.finished_lateness.append(state.finished_at - watched.execute_at)

    @property
    def backlog(self) -> int:
        """Due (at the last observation) and not terminal."""
        return len(self._watch)

    @property
    def not_yet_due(self) -> int:
        with self._lock:
            return len(self._pending)

    @property
    def tracked(self) -> int:
        with self._lock:
            return len(self._pending) + len(self._watch)
