"""How a spread bulk request's jobs are dealt over the shards."""

from __future__ import annotations

from collections import Counter

from jobsvc.jobs.spread import deal


def test_jobs_are_dealt_in_turn_from_the_first_shard():
    assert deal(6, shards=4, first=2) == [2, 3, 0, 1, 2, 3]


def test_every_shard_gets_as_many_jobs_give_or_take_one():
    counts = Counter(deal(1000, shards=3, first=1))
    assert set(counts) == {0, 1, 2}
    assert max(counts.values()) - min(counts.values()) <= 1
