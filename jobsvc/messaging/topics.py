"""Creating the Kafka topics the system uses, idempotently."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int


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
