"""Messages an executor holds before it claims them, taken in weighted fair order by user.

Schedulers dispatch each shard fairly, but what users feel is when their jobs *start*, and
that is decided here: an executor reads ahead of what it runs (up to its read-ahead) and
starts the held jobs in weighted fair order across users, whatever shard or partition they
came from and however long another user's queue is. So a job of a user with nothing else
held starts next, not behind everything already read; and while several users have jobs
held, their starts follow their weights in every batch.

The order is stride scheduling (start-time fair queueing with unit-cost jobs): each user
has a *pass*, the virtual time of its next job's start. ``take`` serves the user with the
smallest pass (ties: who became waiting first), moves the virtual time there, and adds
``1 / weight`` to that user's pass. A user's own jobs go highest priority first, in
arrival order within one priority (the scheduler sends a user's jobs by priority, then
due time): an urgent job read behind the user's own backlog overtakes it here.

No banked credit: a user that had nothing held starts again from the current virtual time,
never from an older pass, so an idle user does not return with a burst. It starts a
fraction of its stride (``1 / weight``) past it, a different fraction for each user that
comes in (the golden-ratio sequence, spread evenly over [0, 1)): users of one weight that
start together would otherwise be served at the same passes, each a job ahead or behind
its share at once, and a class of 25 weight-1 users among 100 was 5-10 % off its share
in 1-second windows (deploy/bench fairness_many_users); spread, their errors cancel. A
user that was served ahead (its pass beyond the virtual time) keeps that pass when its
queue runs dry for a moment, so emptying the queue between two deliveries gains nothing.

Not thread-safe: the executor's loop thread owns it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from typing import Generic, TypeVar

T = TypeVar("T")

_GOLDEN_RATIO_CONJUGATE = (5**0.5 - 1) / 2  # its multiples mod 1 spread evenly


class FairBuffer(Generic[T]):
    def __init__(self, *, report_dry: bool = False) -> None:
        """``report_dry``: see ``ran_dry``."""
        self.report_dry = report_dry
        # Per user with items: a heap of (-priority, arrival, item).
        self._queues: dict[Hashable, list[tuple[int, int, T]]] = {}
        self._weights: dict[Hashable, float] = {}
        # Users served ahead of the virtual time whose queue is empty: their next pass.
        self._ahead: dict[Hashable, float] = {}
        self._turns: list[tuple[float, int, Hashable]] = []  # (pass, arrival, user)
        self._arrivals = itertools.count()
        self._virtual = 0.0
        self._phase = 0.0  # the fraction of its stride the next user to come in starts at
        self._size = 0
        self._run: dict[Hashable, int] = {}  # per user with items: taken since it had none
        self._ran_dry: dict[Hashable, tuple[float, int]] = {}  # see ran_dry

    def __len__(self) -> int:
        return self._size

    def users(self) -> int:
        """Users with at least one item held."""
        return len(self._queues)

    def put(self, user: Hashable, weight: float, item: T, *, priority: int = 0) -> None:
        """Hold ``item`` of ``user``, whose weight (a positive number) is ``weight``."""
        if not weight > 0:
            raise ValueError(f"weight must be positive, got {weight!r}")
        self._weights[user] = weight  # the latest message's weight counts
        queue = self._queues.get(user)
        arrival = next(self._arrivals)
        if queue is None:
            queue = self._queues[user] = []
            start = self._ahead.pop(user, self._virtual)
            if start <= self._virtual:
                start = self._virtual + self._next_phase() / weight
            heapq.heappush(self._turns, (start, arrival, user))
            self._run[user] = 0
        heapq.heappush(queue, (-priority, arrival, item))
        self._size += 1

    def take(self, count: int) -> list[T]:
        """Up to ``count`` items, in weighted fair order; they leave the buffer."""
        taken: list[T] = []
        while len(taken) < count and self._turns:
            start, arrival, user = heapq.heappop(self._turns)
            queue = self._queues[user]
            taken.append(heapq.heappop(queue)[2])
            self._virtual = start
            following = start + 1.0 / self._weights[user]
            self._run[user] += 1
            if queue:
                heapq.heappush(self._turns, (following, arrival, user))
            else:
                del self._queues[user]
                weight, run = self._weights.pop(user), self._run.pop(user)
                if self.report_dry:
                    self._ran_dry[user] = (weight, run)
                self._ahead[user] = following
        self._size -= len(taken)
        self._forget_caught_up()
        return taken

    def ran_dry(self) -> dict[Hashable, tuple[float, int]]:
        """The users whose queue ran dry since the last call (``report_dry`` only), each
        with its weight and how many of its items were taken since it last had none;
        forgotten once returned."""
        users, self._ran_dry = self._ran_dry, {}
        return users

    def clear(self) -> list[T]:
        """Everything held, in no particular order; the buffer is empty after."""
        items = [item for queue in self._queues.values() for _, _, item in queue]
        self.__init__(report_dry=self.report_dry)
        return items

    def _next_phase(self) -> float:
        self._phase = (self._phase + _GOLDEN_RATIO_CONJUGATE) % 1.0
        return self._phase

    def _forget_caught_up(self) -> None:
        """Drop the passes the virtual time has reached: they would start from it anyway."""
        if len(self._ahead) > 2 * len(self._queues) + 64:
            self._ahead = {user: p for user, p in self._ahead.items() if p > self._virtual}
