"""Creating the Kafka topics the system uses, idempotently."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from jobsvc.messaging.topic_names import express_topic_of

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int


def jobs_topics(
    *,
    jobs_topic: str,
    dead_letter_topic: str,
    partitions: int,
    express_partitions: int,
    replication_factor: int = 1,
    express_topic: str | None = None,
) -> list[TopicSpec]:
    """The topics the workers use: jobs, its express topic (by default the one named after
    it; "": none), and dead letters."""
    if express_topic is None:
        express_topic = express_topic_of(jobs_topic)
    topics = [TopicSpec(jobs_topic, partitions, replication_factor)]
    if express_topic:
        topics.append(TopicSpec(express_topic, express_partitions, replication_factor))
    return [*topics, TopicSpec(dead_letter_topic, 1, replication_factor)]


class TopicsUnavailable(Exception):
    """The broker did not answer, or refused to create a topic, before the deadline."""


def ensure_topics(
    *, bootstrap: str, topics: list[TopicSpec], timeout_seconds: float = 60.0
) -> None:
    """Create each topic unless it exists; retry while the broker is starting."""
    admin = AdminClient(
        {"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 3000}
    )
    deadline = time.monotonic() + timeout_seconds
    missing = list(topics)
    while missing:
        try:
            existing = set(admin.list_topics(timeout=5).topics)
            missing = [topic for topic in missing if topic.name not in existing]
            if not missing:
                return
            futures = admin.create_topics(
                [NewTopic(t.name, t.partitions, t.replication_factor) for t in missing]
            )
            for name, future in futures.items():
                try:
                    future.result(timeout=10)
                    logger.info("created topic %s", name)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise TopicsUnavailable(f"could not create topics on {bootstrap}: {exc}") from exc
            logger.info("broker %s not ready yet (%s); retrying", bootstrap, exc)
            time.sleep(0.5)  # back-off between attempts against a starting broker
