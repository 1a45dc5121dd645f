"""Weighted fair share of a shard's dispatch slots among the users who have due jobs.

Every tick a scheduler worker has ``capacity`` free dispatch slots for a shard and, per user
with due jobs, a ``demand`` (how many of that user's jobs are due) and a ``weight`` (the
user's ``job_weight``). :class:`FairShareAllocator` decides how many jobs of each user to
dispatch; :func:`interleave` decides the order in which to publish them.

Allocation, one call per tick
-----------------------------
(A tick that finds capacity left after claiming, because some users had fewer due jobs
than their slots, may share it among the others with ``top_up``; ``settle`` then charges
those extra slots to their credit. Calling ``allocate`` again in the same tick would be
wrong: it would treat every user missing from the second call as idle and wipe its credit.)

1. *Active users* are those with ``demand > 0``. Everyone else is forgotten (see credit).
2. If the capacity is zero, nobody gets a slot and nothing changes. If it covers the whole
   demand, every active user gets its demand.
3. Otherwise the capacity is water-filled: find the level ``L`` at which the targets
   ``target(u) = min(credit(u) + L * weight(u), demand(u))`` add up to ``capacity``.
   A user capped by its demand gets exactly its demand, and the capacity it cannot use
   is shared among the others in proportion to weight. A target below zero (a user
   served in advance, see the first-slot guarantee) means no slot this tick.
4. The targets are rounded to whole slots within ``[0, demand]``: the floor of each
   target, then the slots still missing go one at a time to the users furthest below
   their target (or, where the first-slot guarantee over-committed, are taken back from
   the users furthest above it). Ties go to the lower user id.
5. ``credit(u) = target(u) - slots(u)``: how much of a slot the user is still owed
   (positive) or was served in advance (negative). After every call that shares out
   slots the active users' credits add up to zero, so ``L`` is ``capacity / sum(weight)``
   corrected only for the credit of users who left since.

Credit ("no banked credit")
---------------------------
Credit is the remainder carried between ticks so that small capacities still converge on
the weighted shares (5 slots split 1:2:4 cannot be exact in one tick, but is over a few).
It exists only while a user has demand:

- a user without demand in a call loses its credit, positive or negative, so an idle user
  never returns with a burst (nor with a debt: a user whose jobs come in bursts with idle
  ticks between them gets its first slot promptly each time, at most one slot per burst
  more than its share);
- a user whose whole demand is served keeps no credit (its share above its demand is not
  owed to it later);
- credit is in slots, not in units of weight, so a weight change counts from the next call.

Guarantees
----------
- ``sum(slots) == min(capacity, total demand)`` and ``0 <= slots <= demand``; only users
  with demand get slots.
- While the same users stay backlogged (demand never the limit), a user's cumulative
  slots are at most 1 slot ahead of its weighted share of the cumulative capacity and at
  most ``users - 1`` slots behind it (the worst case being everyone else's first slot),
  however small the capacity per tick.
- First slot: when ``capacity >= number of active users``, every active user with
  ``credit >= 0`` (in particular every user whose jobs just became due) gets at least one
  slot, so a light user is not stuck behind a heavy user's flood. The slot is charged to
  its credit: an advance on its share, not extra share.
- When ``capacity < number of active users``, slots rotate: a backlogged user's credit
  grows by ``L * weight`` per tick from above -1 after its last slot, and a target of 1
  is a slot, so it waits fewer than ``2 * sum(weight) / (capacity * weight)`` ticks.
- Deterministic for the same calls; the order of the mappings does not matter.

A call costs O(users log users): it only looks at per-user numbers, never at the jobs.

Publish order
-------------
:func:`interleave` merges the users' batches by WF2Q (worst-case fair weighted fair
queueing), so every prefix of the order is within one job per user of the weighted split,
and each user's jobs keep their order.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")

DEFAULT_WEIGHT = 1.0  # weight of a user missing from the weights mapping
_PRECISION = 9  # decimal places of a slot that count; below that is float noise


class FairShareAllocator:
    """Weighted fair share of dispatch slots among users with due jobs (one per shard).

    Holds one number of state per active user: its credit, in slots (see the module
    docstring). Not thread-safe; a shard is ticked by one worker thread.
    """

    def __init__(self) -> None:
        self._credit: dict[int, float] = {}

    def allocate(
        self, *, capacity: int, demand: Mapping[int, int], weights: Mapping[int, float]
    ) -> dict[int, int]:
        """Slots per user for this tick: only users given at least one slot, by user id.

        ``demand`` maps user id to its number of due jobs (zero means idle); ``weights``
        maps user id to its positive, finite ``job_weight`` (missing: ``DEFAULT_WEIGHT``).
        Raises ``ValueError`` for a negative capacity or demand or an invalid weight.
        """
        if capacity < 0:
            raise ValueError(f"capacity must not be negative, got {capacity}")
        active = _active_demand(demand)
        weight = {user: weight_of(weights, user) for user in active}
        self._credit = {user: self._credit.get(user, 0.0) for user in active}
        if capacity == 0:
            return {}  # nothing was shared out, so nobody's credit changes
        total = min(capacity, sum(active.values()))
        if total == sum(active.values()):
            self._credit = dict.fromkeys(active, 0.0)
            return active
        level = _water_level(self._credit, weight, active, total)
        targets = {
            user: min(self._credit[user] + level * weight[user], active[user]) for user in active
        }
        first_slot = capacity >= len(active)
        floors = {
            user: 1 if first_slot and round(self._credit[user], _PRECISION) >= 0 else 0
            for user in active
        }
        slots = _round(targets, floors, active, total)
        self._credit = {user: targets[user] - slots[user] for user in active}
        return {user: n for user, n in slots.items() if n > 0}

    def top_up(
        self, *, capacity: int, users: Iterable[int], weights: Mapping[int, float]
    ) -> dict[int, int]:
        """Share slots left over in a tick among users who used their whole allocation.

        The tick's ``allocate`` already applied everyone's credit; the leftover (capacity
        that drained users could not use) is split by weight alone, and nothing is
        recorded: pass what the users really got to ``settle``. Only users given at least
        one slot are returned.
        """
        if capacity <= 0 or not users:
            return {}
        weight = {user: weight_of(weights, user) for user in sorted(set(users))}
        total_weight = sum(weight.values())
        targets = {user: capacity * w / total_weight for user, w in weight.items()}
        slots = _round(targets, dict.fromkeys(weight, 0), dict.fromkeys(weight, capacity), capacity)
        return {user: n for user, n in slots.items() if n > 0}

    def settle(self, *, extra: Mapping[int, int], drained: Iterable[int]) -> None:
        """Record the end of a tick: slots given beyond ``allocate``'s, and who ran dry.

        Extra slots (from ``top_up``) are service in advance: the user's credit goes down
        by them, so every pass of a tick counts toward its share and a user topped up now
        waits accordingly later. A drained user (it got fewer jobs than it was given slots:
        its whole demand was served) keeps no credit, as in ``allocate``.
        """
        for user, slots in extra.items():
            if user in self._credit:
                self._credit[user] -= slots
        for user in drained:
            if user in self._credit:
                self._credit[user] = 0.0


def interleave(batches: Mapping[int, Sequence[T]], weights: Mapping[int, float]) -> list[T]:
    """Publish order: weighted round robin / virtual finish time across users, so the FIFO
    Kafka partitions see the users' jobs mixed in proportion to weight, each user's own
    jobs staying in their given order.

    This is WF2Q: the k-th job (from 0) of a user of weight w starts at virtual time k / w
    and finishes at (k + 1) / w; virtual time advances by 1 / (sum of the weights of users
    with jobs left) per job; of the jobs already started, the one finishing first goes
    next, ties to the lower user id. In every prefix in which all users still have jobs,
    each user's count is within one job of its weighted share of the prefix. O(jobs log
    users).
    """
    weight = {user: weight_of(weights, user) for user, batch in batches.items() if batch}
    taken = dict.fromkeys(weight, 0)
    waiting = [(0.0, user) for user in sorted(weight)]  # heap of (start of next job, user)
    started: list[tuple[float, int]] = []  # heap of (finish of next job, user)
    active_weight = sum(weight.values())
    now = 0.0  # virtual time
    order = []
    while waiting or started:
        while waiting and _reached(waiting[0][0], now):
            start, user = heapq.heappop(waiting)
            heapq.heappush(started, (start + 1 / weight[user], user))
        if not started:
            now = waiting[0][0]
            continue
        finish, user = heapq.heappop(started)
        order.append(batches[user][taken[user]])
        taken[user] += 1
        now += 1 / active_weight
        if taken[user] < len(batches[user]):
            heapq.heappush(waiting, (finish, user))
        else:
            active_weight -= weight[user]
    return order


def _reached(moment: float, now: float) -> bool:
    """Whether virtual time ``now`` has reached ``moment``, forgiving float noise."""
    return moment <= now or math.isclose(moment, now, rel_tol=1e-9)


def weight_of(weights: Mapping[int, float], user: int) -> float:
    """The user's weight, ``DEFAULT_WEIGHT`` if missing; ``ValueError`` unless positive, finite."""
    weight = weights.get(user, DEFAULT_WEIGHT)
    if not (math.isfinite(weight) and weight > 0):
        raise ValueError(f"weight of user {user} must be positive and finite, got {weight!r}")
    return float(weight)


def _active_demand(demand: Mapping[int, int]) -> dict[int, int]:
    """Users with positive demand, by user id; ``ValueError`` for a negative demand."""
    active = {}
    for user in sorted(demand):
        if demand[user] < 0:
            raise ValueError(f"demand of user {user} must not be negative, got {demand[user]}")
        if demand[user] > 0:
            active[user] = demand[user]
    return active


def _water_level(
    credit: Mapping[int, float],
    weight: Mapping[int, float],
    demand: Mapping[int, int],
    total: int,
) -> float:
    """The level L at which ``sum(min(credit + L * weight, demand)) == total``.

    Needs ``total < sum(demand)``. The sum is ``sum(credit) + L * sum(weight)`` for a low
    enough L and bends each time a user's target reaches its demand; walk the bends in order
    of level, keeping the sum as ``base + L * slope``, until it reaches ``total``.
    """
    base = sum(credit.values())
    slope = sum(weight.values())
    caps = sorted(((demand[u] - credit[u]) / w, u) for u, w in weight.items())
    for level, user in caps:
        if base + level * slope >= total:
            break
        base += demand[user] - credit[user]
        slope -= weight[user]
    return (total - base) / slope


def _round(
    targets: Mapping[int, float],
    floors: Mapping[int, int],
    ceilings: Mapping[int, int],
    total: int,
) -> dict[int, int]:
    """Whole slots close to ``targets``, within ``[floors, ceilings]``, adding up to ``total``.

    Starts from the floor of each target and moves one slot at a time: a missing slot goes
    to the user furthest below its target, an extra one is taken from the user furthest
    above it. Fewer moves than users are needed, so this is O(users log users).
    """
    slots = {
        user: max(floors[user], min(math.floor(t), ceilings[user])) for user, t in targets.items()
    }
    missing = total - sum(slots.values())
    step = 1 if missing > 0 else -1
    # Giving: largest shortfall first; taking: largest excess first; ties favour the lower id.
    heap = [
        (_gap(slots[u], t, step), step * u, u)
        for u, t in targets.items()
        if floors[u] <= slots[u] + step <= ceilings[u]
    ]
    heapq.heapify(heap)
    for _ in range(abs(missing)):
        _key, _tie, user = heapq.heappop(heap)
        slots[user] += step
        if floors[user] <= slots[user] + step <= ceilings[user]:
            heapq.heappush(heap, (_gap(slots[user], targets[user], step), step * user, user))
    return slots


def _gap(slots: int, target: float, step: int) -> float:
    """Heap key: how far a move of ``step`` is from being due, rounded so float noise ties.

    Without the rounding, users whose credits are equal on paper would be ordered by noise
    instead of by id, and a round robin among equals would reshuffle every round.
    """
    return round(step * (slots - target), _PRECISION)
