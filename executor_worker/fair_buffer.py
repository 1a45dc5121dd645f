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
``1 / weight`` to that user's pass. A user's own jobs go highest priority first (the
scheduler sends a user's jobs by priority, then due time): an urgent job read behind the
user's own backlog overtakes it here.

Within one priority, a user's jobs go round-robin over their *lanes* (the shard each is
on), in arrival order within a lane. An executor claims the jobs of a turn one shard at
a time, so they start shard by shard over the turn, and a scheduler's round publishes a
user's jobs on a shard together: taken in arrival order, a user's few jobs of a turn
were mostly on one shard, started early or late in the turn, and a 1-second window that
cut the turn saw a class of users far off its share. Traced with 100 users (tools/bench
fairness_many_users), the weight-1 class's share of a shard's claim of 100 jobs or more
varied with a standard deviation of 48-54 % of it in arrival order, and of 23 % taken in
turn from each shard. A lane the user had nothing from joins the round being served, not
ahead of the rounds before it.

No banked credit: a user that had nothing held starts again from the current virtual time,
never from an older pass, so an idle user does not return with a burst. It starts a
fraction of its stride (``1 / weight``) past it, a different fraction for each user that
comes in (the golden-ratio sequence, spread evenly over [0, 1)): users of one weight that
start together would otherwise be served at the same passes, each a job ahead or behind
its share at once, and a class of 25 weight-1 users among 100 was 5-10 % off its share
in 1-second windows (tools/bench fairness_many_users); spread, their errors cancel. A
user that was served ahead (its pass beyond the virtual time) keeps that pass when its
queue runs dry for a moment, so emptying the queue between two deliveries gains nothing.

Not thread-safe: the executor's loop thread owns it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")

_GOLDEN_RATIO_CONJUGATE = (5**0.5 - 1) / 2  # its multiples mod 1 spread evenly
# A user whose two turns' worth (see ran_dry) is fewer items than this is reported only
# once it has none: a turn without it costs it a few jobs. Looking early for such users
# cost more than it mended: with 100 users of weights 1, 2, 5 and 10, where two turns are
# 4-44 jobs of each, the weight-1 class was 6.0 and 7.1 % off its share in a window in
# two runs, against 2.1 % looking only once dry (tools/bench/results/2026-11-25/
# 16-looking-before-dry.md).
_LOW_MARK_FLOOR = 64


class FairBuffer(Generic[T]):
    def __init__(self, *, report_dry: bool = False, turn: int = 0) -> None:
        """``report_dry``, ``turn``: see ``ran_dry``."""
        self.report_dry = report_dry
        self.turn = turn
        self._report_low = report_dry and turn > 0  # see ran_dry
        # Per user with items: a heap of (-priority, round, arrival, item), and per lane
        # the round its next item gets, and the round of the user's last item taken.
        self._queues: dict[Hashable, list[tuple[int, int, int, T]]] = {}
        self._lane_rounds: dict[Hashable, dict[Hashable, int]] = {}
        self._taken_round: dict[Hashable, int] = {}
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
        self._total_weight = 0.0  # of the users with items
        self._running_low: set[Hashable] = set()  # reported as running low, not refilled
        # Per user with items: passes owed for items started outside the buffer (charge),
        # less those of items taken that did not start (refund).
        self._owed: dict[Hashable, float] = {}

    def __len__(self) -> int:
        return self._size

    def users(self) -> int:
        """Users with at least one item held."""
        return len(self._queues)

    def running_low(self, *, min_share: float) -> bool:
        """Whether a user whose weight is at least ``min_share`` of the weights of the
        users holding items is running low (see ``ran_dry``) among others: a heavy user's
        last items here are about to be taken."""
        if len(self._queues) < 2:
            return False
        least = min_share * self._total_weight
        return any(self._weights[user] >= least for user in self._running_low)

    def put(
        self, user: Hashable, weight: float, item: T, *, priority: int = 0, lane: Hashable = None
    ) -> None:
        """Hold ``item`` of ``user``, whose weight (a positive number) is ``weight``; its
        ``lane`` is where it came from (see the module's docstring)."""
        if not weight > 0:
            raise ValueError(f"weight must be positive, got {weight!r}")
        queue = self._queues.get(user)
        arrival = next(self._arrivals)
        if queue is None:
            queue = self._queues[user] = []
            self._total_weight += weight
            start = self._ahead.pop(user, self._virtual)
            if start <= self._virtual:
                start = self._virtual + self._next_phase() / weight
            heapq.heappush(self._turns, (start, arrival, user))
            self._run[user] = 0
            self._lane_rounds[user] = {}
            self._taken_round[user] = 0
        else:
            self._total_weight += weight - self._weights[user]
        self._weights[user] = weight  # the latest message's weight counts
        rounds = self._lane_rounds[user]
        round_ = max(rounds.get(lane, 0), self._taken_round[user])
        rounds[lane] = round_ + 1
        heapq.heappush(queue, (-priority, round_, arrival, item))
        self._size += 1
        if user in self._running_low and not self._is_low(len(queue), weight):
            self._running_low.discard(user)

    def take(self, count: int) -> list[T]:
        """Up to ``count`` items, in weighted fair order; they leave the buffer."""
        taken: list[T] = []
        while len(taken) < count and self._turns:
            start, arrival, user = heapq.heappop(self._turns)
            owed = self._owed.pop(user, 0.0)
            if owed:  # its turn comes that much later (charge) or sooner (refund)
                heapq.heappush(self._turns, (start + owed, arrival, user))
                continue
            queue = self._queues[user]
            _, round_, _, item = heapq.heappop(queue)
            taken.append(item)
            self._taken_round[user] = max(self._taken_round[user], round_)
            self._virtual = max(self._virtual, start)  # a refund (below) may put it behind
            following = start + 1.0 / self._weights[user]
            self._run[user] += 1
            if queue:
                heapq.heappush(self._turns, (following, arrival, user))
                self._note_if_low(user)
            else:
                self._leave(user, following)
        self._size -= len(taken)
        self._forget_caught_up()
        return taken

    def next_of(self, user: Hashable, count: int) -> list[T]:
        """The next ``count`` items of ``user``, in the order ``take`` would give them."""
        return [entry[-1] for entry in heapq.nsmallest(count, self._queues.get(user, ()))]

    def discard(self, user: Hashable, items: Iterable[T]) -> None:
        """Drop these held items of ``user`` (the very objects given to ``put``), which will
        never start (their jobs started elsewhere): they take no turn, and the user keeps its
        pass. A user left with nothing is reported like one whose last item was taken."""
        queue = self._queues.get(user)
        gone = {id(item) for item in items}
        if not queue or not gone:
            return
        kept = [entry for entry in queue if id(entry[-1]) not in gone]
        self._size -= len(queue) - len(kept)
        if kept:
            heapq.heapify(kept)
            self._queues[user] = kept
            self._note_if_low(user)
            return
        (turn,) = [entry for entry in self._turns if entry[2] == user]
        self._turns.remove(turn)
        heapq.heapify(self._turns)
        self._leave(user, turn[0] + self._owed.pop(user, 0.0))

    def charge(self, user: Hashable, weight: float, count: int) -> None:
        """``count`` jobs of ``user`` started without passing through the buffer (the
        executor's express runner): its later items are served as if those had been taken
        here, ``count / weight`` later in virtual time. A user with nothing held comes in
        that much past the virtual time, or past the pass it was served ahead to."""
        if not weight > 0:
            raise ValueError(f"weight must be positive, got {weight!r}")
        if count <= 0:
            return
        cost = count / weight
        if user in self._queues:
            self._owed[user] = self._owed.get(user, 0.0) + cost
        else:
            self._ahead[user] = max(self._ahead.get(user, self._virtual), self._virtual) + cost

    def refund(self, user: Hashable, weight: float, count: int) -> None:
        """``count`` items of ``user`` taken here did not start (their claims found them
        started elsewhere, cancelled or stale): its later items are served as if those
        had not been taken, ``count / weight`` sooner in virtual time, so the fair order
        counts the jobs that start. Nothing is owed to a user that holds no items: it
        comes back no earlier than the current virtual time, refunded or not."""
        if not weight > 0:
            raise ValueError(f"weight must be positive, got {weight!r}")
        if count <= 0:
            return
        if user in self._queues:
            self._owed[user] = self._owed.get(user, 0.0) - count / weight
        elif user in self._ahead:
            self._ahead[user] -= count / weight

    def ran_dry(self) -> dict[Hashable, tuple[float, int]]:
        """The users whose queue ran dry since the last call (``report_dry`` only), each
        with its weight and how many of its items were taken since it last had none;
        forgotten once returned. With ``turn`` (the items a turn takes), also a user whose
        queue is down to two turns' worth of its weight's share (among the users holding
        items), if that is at least ``_LOW_MARK_FLOOR`` items: reported once, and again
        only after its queue grew past that."""
        users, self._ran_dry = self._ran_dry, {}
        return users

    def items_of(self, user: Hashable) -> list[T]:
        """The items of ``user`` held, in no particular order."""
        return [entry[-1] for entry in self._queues.get(user, ())]

    def _leave(self, user: Hashable, next_pass: float) -> None:
        """``user``'s queue is empty: it stops waiting, and would be served next at
        ``next_pass``."""
        del self._queues[user], self._lane_rounds[user], self._taken_round[user]
        weight, run = self._weights.pop(user), self._run.pop(user)
        self._total_weight -= weight
        if not self._queues:
            self._total_weight = 0.0  # no drift from adding and taking away floats
        self._running_low.discard(user)
        if self.report_dry:
            self._ran_dry[user] = (weight, run)
        self._ahead[user] = next_pass

    def _note_if_low(self, user: Hashable) -> None:
        """Report ``user`` as running low (see ``ran_dry``) if it is, once."""
        weight = self._weights[user]
        if (
            self._report_low
            and user not in self._running_low
            and self._is_low(len(self._queues[user]), weight)
        ):
            self._running_low.add(user)
            self._ran_dry[user] = (weight, self._run[user])

    def _is_low(self, held: int, weight: float) -> bool:
        """Whether ``held`` items of a user of ``weight`` are at most two turns' worth, and
        two turns' worth is at least ``_LOW_MARK_FLOOR``."""
        mark = 2 * self.turn * weight
        return held * self._total_weight <= mark and mark >= _LOW_MARK_FLOOR * self._total_weight

    def clear(self) -> list[T]:
        """Everything held, in no particular order; the buffer is empty after."""
        items = [entry[-1] for queue in self._queues.values() for entry in queue]
        self.__init__(report_dry=self.report_dry, turn=self.turn)
        return items

    def _next_phase(self) -> float:
        self._phase = (self._phase + _GOLDEN_RATIO_CONJUGATE) % 1.0
        return self._phase

    def _forget_caught_up(self) -> None:
        """Drop the passes the virtual time has reached: they would start from it anyway."""
        if len(self._ahead) > 2 * len(self._queues) + 64:
            self._ahead = {user: p for user, p in self._ahead.items() if p > self._virtual}
