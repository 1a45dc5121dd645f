"""A shard's gauges are its owner's: the sweeper drops them when the shard is let go."""

from __future__ import annotations

from prometheus_client import REGISTRY

from scheduler_worker import metrics
from scheduler_worker.sweeper import ShardSweeper


class Store:
    shard_id = 97  # a shard no other test reports


def sample(name: str, shard: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"shard": shard})


def test_forgetting_a_shard_drops_its_backlog_and_queue_lag():
    sweeper = ShardSweeper(
        store=Store(),
        producer=None,
        dead_letter_topic="dead",
        publish_timeout=1.0,
        sweep_interval=5.0,
        clock=lambda: 0.0,
    )
    metrics.DUE_BACKLOG.labels("97").set(12)
    metrics.OLDEST_DUE_AGE.labels("97").set(45.0)

    sweeper.forget()

    assert sample("jobsvc_due_backlog_jobs", "97") is None
    assert sample("jobsvc_oldest_due_job_age_seconds", "97") is None
    sweeper.forget()  # nothing left to drop: no error
