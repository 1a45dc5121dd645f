"""Executors share the jobs topic's partitions round-robin, which the schedulers' dealing
relies on: consecutive partitions are different executors', so a user's consecutive jobs
on a shard go to every executor in turn (scheduler_worker.partition_deal), and no
executor runs out of a backlogged user's jobs while another holds a backlog of them."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import JOBS_PARTITIONS
from tests.e2e.test_executor_shutdown import RUN_TIMEOUT, assignment
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)


def test_two_executors_hold_alternate_partitions_of_the_jobs_topic(start_worker, messaging):
    executors = [start_worker("executor", name) for name in ("executor-a", "executor-b")]
    everything = set(range(JOBS_PARTITIONS))

    def held() -> list[set[int]]:
        return [assignment(executor, messaging.jobs_topic) for executor in executors]

    wait_until(
        lambda: all(held()) and set.union(*held()) == everything,
        timeout=RUN_TIMEOUT,
        what="both executors hold partitions of the jobs topic, all of them between them",
    )
    evens, odds = sorted(held(), key=min)
    assert evens == set(range(0, JOBS_PARTITIONS, 2))
    assert odds == set(range(1, JOBS_PARTITIONS, 2))
