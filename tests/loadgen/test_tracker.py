"""The tracker looks up only due, unfinished jobs, one query per shard, and rotates."""

from __future__ import annotations

import pytest

from jobsvc.jobs.models import TERMINAL_STATUSES
from tools.loadgen.tracker import TERMINAL, JobState, JobTracker


class FakeShards:
    """Job states by id, and a record of every lookup (shard, ids)."""

    def __init__(self) -> None:
        self.states: dict[str, JobState] = {}
        self.calls: list[tuple[int, list[str]]] = []

    def set(self, job_id, status, dispatched=None, started=None, finished=None) -> None:
        self.states[job_id] = JobState(job_id, status, dispatched, started, finished)

    def lookup(self, shard: int, ids: list[str]) -> list[JobState]:
        self.calls.append((shard, sorted(ids)))
        return [self.states[i] for i in ids if i in self.states]


def shard_of(job_id: str) -> int:
    return int(job_id.split("-")[0])  # "<shard>-<n>" in these tests


def test_terminal_statuses_agree_with_the_job_model():
    assert frozenset(TERMINAL_STATUSES) == TERMINAL


def test_only_due_jobs_are_looked_up_one_query_per_shard():
    shards = FakeShards()
    tracker = JobTracker(shard_of=shard_of)
    tracker.add([("0-a", 10.0), ("1-b", 10.0), ("0-c", 11.0), ("1-d", 50.0)])
    for job_id in ("0-a", "1-b", "0-c", "1-d"):
        shards.set(job_id, "scheduled")

    tracker.observe(now=20.0, lookup=shards.lookup)

    assert shards.calls == [(0, ["0-a", "0-c"]), (1, ["1-b"])]
    assert tracker.backlog == 3
    assert tracker.not_yet_due == 1


def test_finished_jobs_report_lateness_once_and_leave_the_watch_list():
    shards = FakeShards()
    tracker = JobTracker(shard_of=shard_of)
    tracker.add([("0-a", 10.0), ("0-b", 10.0)])
    shards.set("0-a", "queued", dispatched=10.1)
    shards.set("0-b", "scheduled")

    first = tracker.observe(now=10.5, lookup=shards.lookup)
    assert (first.dispatched, first.executed, tracker.backlog) == (1, 0, 2)

    shards.set("0-a", "succeeded", dispatched=10.1, started=10.25, finished=10.5)
    shards.set("0-b", "failed", dispatched=10.2, started=10.3, finished=11.0)
    second = tracker.observe(now=11.5, lookup=shards.lookup)
    # 0-a was already counted as dispatched; 0-b went from scheduled to failed unseen.
    assert second.dispatched == 1
    assert dict(second.statuses) == {"succeeded": 1, "failed": 1}
    assert second.executed == 2
    assert sorted(second.started_lateness) == pytest.approx([0.25, 0.3])
    assert sorted(second.finished_lateness) == [0.5, 1.0]
    assert tracker.backlog == 0

    shards.calls.clear()
    third = tracker.observe(now=12.0, lookup=shards.lookup)
    assert shards.calls == []
    assert third.executed == 0


def test_a_cancelled_job_is_finished_but_neither_dispatched_nor_executed():
    shards = FakeShards()
    tracker = JobTracker(shard_of=shard_of)
    tracker.add([("0-a", 1.0)])
    shards.set("0-a", "cancelled", finished=1.5)
    seen = tracker.observe(now=2.0, lookup=shards.lookup)
    assert (seen.dispatched, seen.executed, dict(seen.statuses)) == (0, 0, {"cancelled": 1})
    assert seen.finished_lateness == []


def test_a_job_gone_from_its_shard_is_counted_missing_and_dropped():
    shards = FakeShards()
    tracker = JobTracker(shard_of=shard_of)
    tracker.add([("0-a", 1.0)])
    seen = tracker.observe(now=2.0, lookup=shards.lookup)
    assert dict(seen.statuses) == {"missing": 1}
    assert tracker.tracked == 0


def test_a_backlog_beyond_the_lookup_limit_is_looked_at_in_turn():
    shards = FakeShards()
    tracker = JobTracker(shard_of=shard_of, lookup_limit=2)
    ids = ["0-a", "0-b", "0-c", "0-d", "0-e"]
    tracker.add([(job_id, 1.0) for job_id in ids])
    for job_id in ids:
        shards.set(job_id, "scheduled")

    looked_at = []
    for _ in range(3):
        shards.calls.clear()
        tracker.observe(now=2.0, lookup=shards.lookup)
        looked_at += shards.calls[0][1]

    assert set(looked_at) == set(ids)  # every job within three observations
    assert tracker.backlog == 5
