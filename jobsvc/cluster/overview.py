"""The cluster at a glance: every part read at once, each allowed to be unavailable.

ZooKeeper (scheduler members, shard owners) and Kafka (the executors' consumer group, its
lag, the dead-letter topic) are read on threads while the
request's thread reads the shard databases (Django's connections belong to the thread
that opened them). Each part has ``PART_TIMEOUT`` seconds; a part that fails or is late
is reported as unavailable with the reason, and the rest of the page is still shown.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Generic, TypeVar

from django.conf import settings
from django.db import Error as DatabaseError

from coordination.cluster import ClusterMembership, cluster_membership
from coordination.errors import CoordinationError
from jobsvc.cluster.shard_stats import ShardStats, shard_stats
from jobsvc.messaging.consumer_group import (
    ConsumerGroupView,
    MessagingUnavailable,
    consumer_group_view,
    topic_message_count,
)
from jobsvc.sharding.shards import shard_ids
from jobsvc.zookeeper import zookeeper_auth

logger = logging.getLogger(__name__)

PART_TIMEOUT = 0.6  # seconds each part (ZooKeeper, Kafka, a shard) may take
PART_WAIT = 0.9  # seconds from the start until ZooKeeper's and Kafka's parts are given up

T = TypeVar("T")


@dataclass(frozen=True)
class Part(Generic[T]):
    """One part of the overview: its value, or why it is unavailable."""

    value: T | None = None
    error: str | None = None


@dataclass(frozen=True)
class ClusterOverview:
    membership: Part[ClusterMembership]
    shards: list[Part[ShardStats]]  # one per shard, in shard order
    executors: Part[ConsumerGroupView]
    dead_letters: Part[int]
    seconds: float  # how long gathering took


def cluster_overview() -> ClusterOverview:
    started = time.monotonic()
    ids = list(shard_ids())
    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="cluster-overview")
    try:
        membership = pool.submit(
            cluster_membership,
            hosts=settings.ZK_HOSTS,
            root=settings.ZK_ROOT,
            shard_ids=ids,
            timeout=PART_TIMEOUT,
            auth=zookeeper_auth(),
        )
        executors = pool.submit(
            consumer_group_view,
            bootstrap=settings.KAFKA_BOOTSTRAP,
            group_id=settings.EXECUTOR_GROUP_ID,
            topic=settings.KAFKA_JOBS_TOPIC,
            timeout=PART_TIMEOUT,
        )
        dead_letters = pool.submit(
            topic_message_count,
            bootstrap=settings.KAFKA_BOOTSTRAP,
            topic=settings.KAFKA_DEAD_LETTER_TOPIC,
            timeout=PART_TIMEOUT,
        )
        shards = [_shard(shard_id) for shard_id in ids]
        deadline = started + PART_WAIT
        return ClusterOverview(
            membership=_collect("ZooKeeper", membership, deadline),
            shards=shards,
            executors=_collect("Kafka", executors, deadline),
            dead_letters=_collect("Kafka", dead_letters, deadline),
            seconds=time.monotonic() - started,
        )
    finally:
        # A late part is not waited for: its own timeout ends its thread soon after.
        pool.shutdown(wait=False, cancel_futures=True)


def _shard(shard_id: int) -> Part[ShardStats]:
    try:
        return Part(shard_stats(shard_id=shard_id, timeout=PART_TIMEOUT))
    except DatabaseError as exc:
        logger.warning("cluster page: shard %s unavailable: %s", shard_id, exc)
        return Part(error=_first_line(exc))


def _collect(what: str, future: Future[T], deadline: float) -> Part[T]:
    try:
        return Part(future.result(timeout=max(0.0, deadline - time.monotonic())))
    except FutureTimeout:
        return Part(error=f"{what} did not answer within {PART_WAIT:g} s")
    except (CoordinationError, MessagingUnavailable) as exc:
        logger.warning("cluster page: %s unavailable: %s", what, exc)
        return Part(error=_first_line(exc))
    except Exception as exc:  # a client library's own error: still a page, not a 500
        logger.exception("cluster page: reading %s failed", what)
        return Part(error=f"{type(exc).__name__}: {_first_line(exc)}")


def _first_line(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
