"""Which held job starts next: weighted fair order across users (stride scheduling).

This is where users' shares are decided (docs/design/fairness.md). An executor reads every
job the schedulers have in flight for its partitions, and starts them in this order,
whatever shard or partition they came from and however long another user's queue is:
a job of a user with nothing else held starts next, not behind everything already read,
and while several users have jobs held, their starts follow their weights.

``FairQueue`` is start-time fair queueing with unit-cost jobs: each user has a *pass*, the
virtual time of its next start. ``take`` serves the user with the smallest pass (ties: who
came first), moves the virtual time there, and adds ``1 / weight`` to that user's pass.
A user's own jobs go highest priority first, so an urgent job overtakes its user's own
backlog, then in arrival order; but the sources items say they came from (their shards)
take turns within a user, ``SOURCE_TURN`` items each, each source's in arrival order.
A user that had nothing held starts from the current virtual time, never from an older
pass (no banked credit), at a fraction of its stride past it: the golden-ratio sequence
spreads users of one weight that come in together over the stride, so that their errors
in any window cancel instead of adding up. A user served ahead keeps its pass while its
queue is empty for a moment.

``StartOrder`` holds two of them, one per resource jobs wait for: jobs whose handler runs
inline (in the claim's transaction) are taken a claim batch at a time, jobs that need a
handler thread only as threads come free. Each resource is shared by weight.

Inline jobs take turns by shard. Each shard's scheduler supplies a user as fast as the
user's jobs from that shard finish (scheduler_worker.in_flight), so in arrival order a
shard that happened to supply more stays ahead, and the user's shards run out a second or
more apart, its share falling while the last ones drain. Taking turns, no shard gets more
than a turn ahead at an executor, and they run out together. A turn is longer than a
claim batch, so a batch takes each user's jobs from one or two shards, as in arrival
order, not one transaction per shard for every batch. Thread jobs keep arrival order:
taken a few at a time, turns would make each claim span more shards, and their run-out
follows the executors' spread, not the shards' (docs/design/fairness.md).
Not thread-safe: the executor's loop thread owns it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")

_GOLDEN_RATIO_CONJUGATE = (5**0.5 - 1) / 2  # its multiples mod 1 spread evenly over [0, 1)
# A user's items from one source taken in a row while its others wait: more than the
# executor's claim batch (250 inline jobs, all users').
SOURCE_TURN = 256


@dataclass(slots=True)
class _UserQueue(Generic[T]):
    """One user's held items and where its sources stand in their turns."""

    weight: float  # the latest item's weight counts
    # A heap of (-priority, its source's turn, seq, item).
    items: list[tuple[int, int, int, T]] = field(default_factory=list)
    slots: dict[Hashable, int] = field(default_factory=dict)  # each source's next slot
    level: int = 0  # the first slot of the latest turn taken (turn x source_turn)

    def push(self, item: T, *, priority: int, source: Hashable, seq: int, turn: int) -> None:
        slot = max(self.slots.get(source, 0), self.level)
        self.slots[source] = slot + 1
        heapq.heappush(self.items, (-priority, slot // turn, seq, item))

    def pop(self, turn: int) -> T:
        _, taken_turn, _, item = heapq.heappop(self.items)
        self.level = max(self.level, taken_turn * turn)
        return item

    def keep(self, keep: Callable[[T], bool], turn: int) -> list[T]:
        """Take out the items ``keep`` refuses; what comes next, of any source, goes after
        what was kept."""
        kept: list[tuple[int, int, int, T]] = []
        removed: list[T] = []
        for entry in self.items:
            if keep(entry[3]):
                kept.append(entry)
            else:
                removed.append(entry[3])
        if removed:
            heapq.heapify(kept)
            self.items, self.slots = kept, {}
            self.level = (max((entry[1] for entry in kept), default=-1) + 1) * turn
        return removed


class FairQueue(Generic[T]):
    """Items of users, taken in weighted fair order (see the module's docstring)."""

    def __init__(self, *, source_turn: int = SOURCE_TURN) -> None:
        self._source_turn = source_turn
        self._users: dict[Hashable, _UserQueue[T]] = {}  # users with items held
        self._turns: list[tuple[float, int, Hashable]] = []  # (pass, seq, user)
        self._ahead: dict[Hashable, float] = {}  # served-ahead passes of users with nothing
        self._seq = itertools.count()
        self._virtual = 0.0
        self._phase = 0.0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def put(
        self, user: Hashable, weight: float, item: T, *, priority: int = 0, source: Hashable = None
    ) -> None:
        """Hold ``item`` of ``user``, whose weight (positive) is ``weight``, from ``source``
        (a source that had nothing held joins the turn being taken: it banks no turns)."""
        if not weight > 0:
            raise ValueError(f"weight must be positive, got {weight!r}")
        queue = self._users.get(user)
        seq = next(self._seq)
        if queue is None:
            queue = self._users[user] = _UserQueue(weight)
            start = self._ahead.pop(user, self._virtual)
            if start <= self._virtual:
                self._phase = (self._phase + _GOLDEN_RATIO_CONJUGATE) % 1.0
                start = self._virtual + self._phase / weight
            heapq.heappush(self._turns, (start, seq, user))
        queue.weight = weight
        queue.push(item, priority=priority, source=source, seq=seq, turn=self._source_turn)
        self._size += 1

    def take(self, count: int) -> list[T]:
        """Up to ``count`` items in weighted fair order; they leave the queue."""
        taken: list[T] = []
        while len(taken) < count and self._turns:
            start, seq, user = heapq.heappop(self._turns)
            queue = self._users[user]
            taken.append(queue.pop(self._source_turn))
            self._virtual = start
            following = start + 1.0 / queue.weight
            if queue.items:
                heapq.heappush(self._turns, (following, seq, user))
            else:
                del self._users[user]
                self._ahead[user] = following
        self._size -= len(taken)
        if len(self._ahead) > 2 * len(self._users) + 64:  # forget passes already reached
            self._ahead = {user: p for user, p in self._ahead.items() if p > self._virtual}
        return taken

    def remove(self, keep: Callable[[T], bool]) -> list[T]:
        """Take out every item ``keep`` refuses (in no particular order); the users keep
        their passes."""
        removed: list[T] = []
        for user, queue in list(self._users.items()):
            removed += queue.keep(keep, self._source_turn)
            if not queue.items:
                self._drop_user(user)
        self._size -= len(removed)
        return removed

    def clear(self) -> list[T]:
        """Everything held, in no particular order; the queue is empty after."""
        items = [entry[3] for queue in self._users.values() for entry in queue.items]
        self.__init__(source_turn=self._source_turn)
        return items

    def _drop_user(self, user: Hashable) -> None:
        turn = next(entry for entry in self._turns if entry[2] == user)
        self._turns.remove(turn)
        heapq.heapify(self._turns)
        del self._users[user]
        self._ahead[user] = turn[0]


class Startable(Protocol):
    """What the start order needs to know of a job."""

    user_id: int
    weight: float
    priority: int
    shard_id: int
    inline: bool  # its handler runs in the claim's transaction (no thread needed)


S = TypeVar("S", bound=Startable)


class StartOrder(Generic[S]):
    """The due jobs an executor holds, by the resource they wait for (see the module's
    docstring), and those of shards that cannot be reached, set aside until they can."""

    def __init__(self) -> None:
        self._inline: FairQueue[S] = FairQueue()
        self._threaded: FairQueue[S] = FairQueue()
        self._set_aside: dict[int, list[S]] = {}

    def __len__(self) -> int:
        return len(self._inline) + len(self._threaded) + self.set_aside()

    def set_aside(self) -> int:
        """Jobs held apart because their shard cannot be reached."""
        return sum(len(jobs) for jobs in self._set_aside.values())

    def waiting(self) -> tuple[int, int]:
        """Jobs that could be taken now: (inline, threaded)."""
        return len(self._inline), len(self._threaded)

    def put(self, jobs: Iterable[S]) -> None:
        for job in jobs:
            aside = self._set_aside.get(job.shard_id)
            if aside is not None:
                aside.append(job)
                continue
            queue = self._inline if job.inline else self._threaded
            source = job.shard_id if job.inline else None  # see the module's docstring
            queue.put(job.user_id, job.weight, job, priority=job.priority, source=source)

    def take(self, *, inline: int, threaded: int) -> list[S]:
        """Up to ``inline`` jobs that run inline and ``threaded`` that need a thread, each
        kind in weighted fair order; thread jobs first (their threads are idle now)."""
        return self._threaded.take(max(0, threaded)) + self._inline.take(max(0, inline))

    def set_aside_shard(self, shard_id: int, jobs: Iterable[S] = ()) -> None:
        """``shard_id`` cannot be reached: hold its jobs (these and those queued) apart."""
        aside = self._set_aside.setdefault(shard_id, [])
        aside.extend(jobs)
        for queue in (self._inline, self._threaded):
            aside.extend(queue.remove(lambda job: job.shard_id != shard_id))

    def restore(self, answering: Callable[[int], bool]) -> None:
        """Put back the jobs of the shards set aside that answer again."""
        for shard_id in [shard for shard in self._set_aside if answering(shard)]:
            self.put(self._set_aside.pop(shard_id))

    def clear(self) -> list[S]:
        jobs = self._inline.clear() + self._threaded.clear()
        jobs += [job for aside in self._set_aside.values() for job in aside]
        self._set_aside.clear()
        return jobs
