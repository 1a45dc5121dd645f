"""Work stealing: an executor running out of a user's jobs runs those another one holds.

Each executor starts the jobs it holds in weighted fair order (executor_worker.fair_buffer),
so a user gets its weight's share of each executor, and of the whole, while every executor
holds some of its jobs. But a user's jobs are dealt to the partitions, and so to the
executors, when they are published, up to the schedulers' in-flight limit (two seconds of
work or more in a flood) before they start. Executors do not drain at one speed on a
shared machine, and the faster one runs out of a heavy user's jobs first: until the slower
one is done too, that user gets its share of one executor only. Measured on 1:2:4 weights
(tools/bench fairness_end_to_end), the weight-4 user's share of the last second of its
backlog fell from 0.571 to 0.35-0.54 in about one run in three.

So when a user's jobs here run low after a run of at least ``backlog_run`` of them
(``FairBuffer.ran_dry``: down to two turns' worth of its weight's share if that is 64
jobs or more, or none), the executor looks in every shard for that user's jobs that were
published and are due but that no executor has started (``ClaimStore.work_to_steal``),
and holds them as if it had read their messages. Left out are the jobs it holds itself,
and those published or due under half a second ago: those are on their way to an
executor, not waiting in a slower one (an executor that keeps up has a short queue of
every user, and would otherwise take its peer's jobs in transit, which that one then
drops). They are started by a claim that is conditional on the attempt not having
started, like any other: whichever executor claims a job second finds it started and
drops its copy, so nothing runs twice, and gives its user back the turn that copy took
in its fair order (``FairBuffer.refund``): charged, those turns were the user's loss
where it was stolen from. But a refund comes only from the next take on, and near the
run-out there are one or two: so once a claim found a user's copy started elsewhere, the
executor checks that user's next held copies before each take and drops those started
elsewhere before they take a turn (``ExecutorWorker._drop_started_elsewhere``). A look
takes the *newest* half of those jobs: the executor that holds their messages starts a
user's jobs oldest first on each shard (executor_worker.fair_buffer's lanes), and the
look is per shard, so the two work from opposite ends, and run out about together; the
first to run low looks again (a user a look found jobs for is looked for whenever it
runs low or dry, however short its run), until a look finds nothing. So a user's last
jobs are shared out in halves, and those of an executor that holds its messages and runs
nothing (stuck, or far slower) are all run by the others.

Looking only once a user had run dry narrowed the gap but did not close it: over fourteen
alternated runs the weight-4 user's share of its last second was 0.489-0.565 (median
0.517) against 0.395-0.565 (median 0.490) without stealing. The look came a turn late,
after a turn that had nothing of that user (tools/bench/results/2026-11-25/15-work-stealing.md).
Looking while two turns' worth are left, over seventeen runs the share was 0.513-0.572
(median 0.545), within 5 % in 11, against 0.460-0.543 (median 0.524) and none of 13 before;
the drain was about 7 % slower in the first pairs but not in the last five (4 % in the
pooled medians), for reasons the traces did not show
(tools/bench/results/2026-11-25/16-looking-before-dry.md).

Taking half the *difference* between the others' jobs and its own instead, so that both
hold as many after a look, was worse: the second before the weight-4 user's last start was
7.3-17.5 % off its share (median 12.4) against 1.5-12.2 % (median 5.1) over five
alternated pairs. The executor that looks first is most often the faster one, and the
larger half suits it (tools/bench/results/2026-11-26/21-dispatcher-split.md).

A look that held the jobs it took for its executor for 5 s (the executor holding their
messages set its copies aside meanwhile) ended the duplicates of a user's last jobs, but
the split of those jobs between the executors could no longer be evened out, and the
weight-4 user's last second was 30-52 % off its share in three alternated pairs against
11-18 %; held 0.5 s, it was worse in 9 of 10 pairs (median 19.1 % against 9.8 %;
tools/bench/results/2026-11-27/25-held-steals.md).

What was left of that last second was the executors' last turns of the user: both take
copies of the same jobs in one turn, and only one starts each. So while a user with a
quarter of the weights or more runs low among others, the executor takes quarter turns
(``ExecutorWorker._claim_batch``): over eleven alternated pairs the weight-4 user's last
second was 0.8-2.7 % off its share against 2.1-13.1 %
(tools/bench/results/2026-11-27/29-short-turns-at-run-out.md).

A look is a query per shard, so there is at most one per ``interval``, for at most
``max_users`` users (the heaviest first).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable

# Users a look found jobs for, remembered until a look finds none for them; beyond this
# many (users who never ran dry here again) they are all forgotten.
_FOUND_LIMIT = 10_000


class WorkStealing:
    def __init__(
        self, *, backlog_run: int, max_users: int, interval: float, clock: Callable[[], float]
    ) -> None:
        self.backlog_run = backlog_run
        self.max_users = max_users
        self.interval = interval  # seconds between looks
        self._clock = clock
        self._wanted: dict[Hashable, float] = {}  # users to look for, with their weights
        self._found: set[Hashable] = set()  # users the last look for them found jobs for
        self._next_look = -math.inf

    def ran_dry(self, users: dict[Hashable, tuple[float, int]]) -> None:
        """Users whose jobs here ran low or out: (weight, jobs taken in a row before), as
        ``FairBuffer.ran_dry`` gives them."""
        for user, (weight, run) in users.items():
            if run >= self.backlog_run or user in self._found:
                self._wanted[user] = weight

    def users_to_look_for(self) -> dict[Hashable, float]:
        """The users to look for now, with their weights (empty: no look now); they are
        wanted again only once they run dry again. Report what the look found
        (``found``)."""
        if not self._wanted or self._clock() < self._next_look:
            return {}
        self._next_look = self._clock() + self.interval
        heaviest = sorted(self._wanted.items(), key=lambda item: -item[1])[: self.max_users]
        for user, _ in heaviest:
            del self._wanted[user]
        return dict(heaviest)

    def found(self, looked_for: Iterable[Hashable], found: Iterable[Hashable]) -> None:
        """What a look found: jobs of the users in ``found``, none of the others."""
        if len(self._found) > _FOUND_LIMIT:
            self._found.clear()
        self._found.difference_update(looked_for)
        self._found.update(found)
