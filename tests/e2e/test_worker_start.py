"""A worker refuses to start against topics weaker than the settings ask: a cluster
configured for three replicas must not quietly run on topics of one."""

from __future__ import annotations

import pytest

from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

STRONGER = {"JOBSVC_KAFKA_REPLICATION_FACTOR": "3", "JOBSVC_KAFKA_MIN_INSYNC_REPLICAS": "2"}


@pytest.mark.parametrize("kind", ["scheduler", "executor"])
def test_a_worker_will_not_start_against_topics_with_fewer_replicas_than_configured(
    kind, start_worker
):
    worker = start_worker(kind, f"{kind}-a", env=STRONGER)  # the test's topics have one

    wait_until(lambda: not worker.alive(), timeout=60, what=f"the {kind} exits")
    assert worker.process.returncode != 0
    assert "Kafka topics weaker than configured" in worker.log()
    assert "1 replicas, 3 configured" in worker.log()
