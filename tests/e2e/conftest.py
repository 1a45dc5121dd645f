"""Fixtures for end-to-end tests: real scheduler and executor processes on the test stack.

Each test gets its own Kafka topics, consumer group and ZooKeeper root, so workers of one
test never see another's messages; jobs live in the shared shard databases, which the
transactional database fixture empties after each test (after the workers stopped).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from jobsvc.accounts.webhook_secrets import webhook_secret_get
from jobsvc.messaging.topics import ensure_topics, jobs_topics
from jobsvc.sharding.shards import shard_ids
from tests.coordination.support import FaultProxy
from tools.bench.processes import WorkerProcess
from tools.devstack.kafka import KafkaBroker
from tools.devstack.ports import free_port
from tools.devstack.stack import new_stack_dir
from tools.fast_timings import FAST_FAILURE_TIMINGS
from tools.webhook_receiver import Receiver

if TYPE_CHECKING:
    from tests.e2e.jobs_topic import JobsTopic

JOBS_PARTITIONS = 4
# Fast failure timings for tests; production defaults are in jobsvc/settings.py.
FAST_TIMINGS = FAST_FAILURE_TIMINGS


@dataclass
class Messaging:
    """This test's topics, consumer group and ZooKeeper root, and the workers' environment."""

    jobs_topic: str
    dead_letter_topic: str
    group_id: str
    zk_root: str
    env: dict[str, str]


@pytest.fixture
def messaging() -> Messaging:
    suffix = uuid.uuid4().hex[:10]
    result = Messaging(
        jobs_topic=f"jobs-{suffix}",
        dead_letter_topic=f"dead-letter-{suffix}",
        group_id=f"executors-{suffix}",
        zk_root=f"/e2e-{suffix}",
        env={},
    )
    result.env = {
        **os.environ,
        **FAST_TIMINGS,
        "JOBSVC_KAFKA_JOBS_TOPIC": result.jobs_topic,
        "JOBSVC_KAFKA_DEAD_LETTER_TOPIC": result.dead_letter_topic,
        "JOBSVC_EXECUTOR_GROUP_ID": result.group_id,
        "JOBSVC_ZK_ROOT": result.zk_root,
        "PYTHONUNBUFFERED": "1",
    }
    ensure_topics(
        bootstrap=settings.KAFKA_BOOTSTRAP,
        topics=jobs_topics(
            jobs_topic=result.jobs_topic,
            dead_letter_topic=result.dead_letter_topic,
            partitions=JOBS_PARTITIONS,
        ),
    )
    return result


@pytest.fixture
def start_worker(
    messaging: Messaging, tmp_path: Path, transactional_db
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start ``run_scheduler`` / ``run_executor`` processes; all are stopped afterwards.

    ``env`` adds to (and overrides) the test's environment for that one worker.
    """
    workers: list[WorkerProcess] = []

    def start(kind: str, name: str, *, env: dict[str, str] | None = None, args=()) -> WorkerProcess:
        worker = WorkerProcess(
            kind=kind,
            name=name,
            env={**messaging.env, **(env or {})},
            log_dir=tmp_path,
            args=tuple(args),
        )
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.stop()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver(secret_of=lambda user_id: webhook_secret_get(user_id=user_id).secret).start()
    yield server
    server.stop()


@pytest.fixture
def jobs_topic(messaging: Messaging) -> Iterator[JobsTopic]:
    """The test's jobs topic, for tests that publish job messages themselves."""
    from tests.e2e.jobs_topic import JobsTopic  # it imports this module

    topic = JobsTopic(messaging)
    yield topic
    topic.close()


@pytest.fixture
def broker() -> Iterator[KafkaBroker]:
    """A broker of the test's own, so stopping or restarting it cannot disturb the shared one.

    Ask for it before the workers that use it, so that it is stopped after them.
    """
    root = new_stack_dir("jobsvc-broker-")
    server = KafkaBroker(root=root / "kafka", port=free_port())
    server.start()
    yield server
    server.stop()
    shutil.rmtree(root, ignore_errors=True)


def create_topics(broker: KafkaBroker, messaging: Messaging) -> None:
    """This test's topics on a broker of its own."""
    ensure_topics(
        bootstrap=broker.bootstrap,
        topics=jobs_topics(
            jobs_topic=messaging.jobs_topic,
            dead_letter_topic=messaging.dead_letter_topic,
            partitions=JOBS_PARTITIONS,
        ),
    )


@pytest.fixture
def shard_proxy() -> Iterator[FaultProxy]:
    """A proxy in front of the last shard's PostgreSQL server, to cut and restore."""
    url = urlsplit(settings.SHARD_DB_URLS[max(shard_ids())])
    proxy = FaultProxy(f"{url.hostname}:{url.port}")
    yield proxy
    proxy.close()
