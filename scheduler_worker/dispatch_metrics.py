"""What a dispatcher reports of fairness: backlogged users, due shares, dispatched jobs.

Fairness is shown per weight class (``metrics.weight_class``), never per user, so the
number of time series stays bounded however many users there are.
"""

from __future__ import annotations

from collections import defaultdict

from scheduler_worker import metrics
from scheduler_worker.shard_store import ClaimedJob


class BackloggedGauges:
    """One shard's backlogged users per weight class, and each class's due share.

    Labelled by shard (each shard's thread sets its own series); a class that is no
    longer backlogged here drops to 0 instead of keeping its last value. The classes set
    so far are remembered, so ``forget`` can remove the shard's series when it goes.
    """

    def __init__(self, *, shard_id: int) -> None:
        self._shard_label = str(shard_id)
        self._weight_classes: set[str] = set()  # backlogged classes in the gauges, this shard

    def observe(self, weights: dict[int, float]) -> None:
        """Set the gauges from this round's backlogged users and their weights."""
        users: dict[str, int] = defaultdict(int)
        weight: dict[str, float] = defaultdict(float)
        for user_weight in weights.values():
            label = metrics.weight_class(user_weight)
            users[label] += 1
            weight[label] += user_weight
        total = sum(weight.values()) or 1.0
        for label in self._weight_classes - set(users):
            metrics.BACKLOGGED_USERS.labels(self._shard_label, label).set(0)
            metrics.SHARE_TARGET.labels(self._shard_label, label).set(0)
        for label in users:
            metrics.BACKLOGGED_USERS.labels(self._shard_label, label).set(users[label])
            metrics.SHARE_TARGET.labels(self._shard_label, label).set(weight[label] / total)
        self._weight_classes |= set(users)

    def forget(self) -> None:
        """The shard is no longer this dispatcher's: its series go (the next owner's count)."""
        for label in self._weight_classes:
            metrics.BACKLOGGED_USERS.remove(self._shard_label, label)
            metrics.SHARE_TARGET.remove(self._shard_label, label)
        self._weight_classes = set()


def observe_dispatched(
    *, jobs: list[ClaimedJob], failed: set[int], weights: dict[int, float]
) -> None:
    """Count the jobs the broker took (all but the indexes in ``failed``), and their lag."""
    per_class: dict[str, int] = defaultdict(int)
    for index, job in enumerate(jobs):
        if index in failed:
            continue
        per_class[metrics.weight_class(weights.get(job.user_id, 1.0))] += 1
        metrics.DISPATCH_LAG.observe(max(0.0, (job.dispatched_at - job.due_at).total_seconds()))
    for label, count in per_class.items():
        metrics.JOBS_DISPATCHED.labels(label).inc(count)
