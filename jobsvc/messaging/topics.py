"""The Kafka topics the system uses: created idempotently, and checked for durability.

Every topic is created with the configured replication factor, ``min.insync.replicas``
and unclean leader election off: with producers on ``acks=all``, a message the broker
acknowledged is then on at least ``min.insync.replicas`` brokers, and a replica that
missed it can never become the leader. ``verify_topics`` refuses topics that were created
weaker (by hand, or by an older version): the workers run it before they start.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from jobsvc.messaging.client_security import kafka_security_config

logger = logging.getLogger(__name__)

_ADMIN_TIMEOUT = 10.0  # seconds one admin request may take


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    min_insync_replicas: int = 1

    def config(self) -> dict[str, str]:
        """The topic-level settings it is created with (and checked against)."""
        return {
            "min.insync.replicas": str(self.min_insync_replicas),
            "unclean.leader.election.enable": "false",
        }


def jobs_topics(
    *,
    jobs_topic: str,
    dead_letter_topic: str,
    partitions: int,
    replication_factor: int = 1,
    min_insync_replicas: int = 1,
) -> list[TopicSpec]:
    """The topics the workers use: jobs (``partitions`` for the executors' group) and dead
    letters."""
    return [
        TopicSpec(jobs_topic, partitions, replication_factor, min_insync_replicas),
        TopicSpec(dead_letter_topic, 1, replication_factor, min_insync_replicas),
    ]


def configured_topics() -> list[TopicSpec]:
    """The topics the settings name (JOBSVC_KAFKA_*)."""
    from django.conf import settings

    return jobs_topics(
        jobs_topic=settings.KAFKA_JOBS_TOPIC,
        dead_letter_topic=settings.KAFKA_DEAD_LETTER_TOPIC,
        partitions=settings.KAFKA_JOBS_PARTITIONS,
        replication_factor=settings.KAFKA_REPLICATION_FACTOR,
        min_insync_replicas=settings.KAFKA_MIN_INSYNC_REPLICAS,
    )


class TopicsUnavailable(Exception):
    """The broker did not answer, or refused to create a topic, before the deadline."""


class TopicsTooWeak(Exception):
    """A topic exists with fewer replicas, or a weaker durability setting, than configured."""


def ensure_topics(
    *, bootstrap: str, topics: list[TopicSpec], timeout_seconds: float = 60.0
) -> None:
    """Create each topic unless it exists; retry while the broker is starting."""
    admin = AdminClient(
        {
            "bootstrap.servers": bootstrap,
            **kafka_security_config(),
            "socket.connection.setup.timeout.ms": 3000,
        }
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
                [
                    NewTopic(t.name, t.partitions, t.replication_factor, config=t.config())
                    for t in missing
                ]
            )
            for name, future in futures.items():
                try:
                    future.result(timeout=_ADMIN_TIMEOUT)
                    logger.info("created topic %s", name)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise TopicsUnavailable(f"could not create topics on {bootstrap}: {exc}") from exc
            logger.info("broker %s not ready yet (%s); retrying", bootstrap, exc)
            time.sleep(0.5)  # back-off between attempts against a starting broker


def verify_topics(*, bootstrap: str, topics: list[TopicSpec], timeout: float) -> None:
    """Raise ``TopicsTooWeak`` naming every topic weaker than its spec (missing, fewer
    replicas on a partition, a lower ``min.insync.replicas``, unclean leader election on);
    ``TopicsUnavailable`` if the broker cannot be asked within ``timeout`` seconds."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **kafka_security_config(), "log_level": 2})
    try:
        metadata = admin.list_topics(timeout=timeout).topics
        described = {
            t.name: metadata[t.name]
            for t in topics
            if t.name in metadata and not metadata[t.name].error
        }
        configs = _topic_configs(admin, list(described), timeout)
    except KafkaException as exc:
        raise TopicsUnavailable(f"cannot describe topics on {bootstrap}: {exc}") from exc
    problems = []
    for spec in topics:
        topic = described.get(spec.name)
        if topic is None:
            problems.append(f"{spec.name}: does not exist (run `manage.py ensure_topics`)")
            continue
        replicas = min(len(partition.replicas) for partition in topic.partitions.values())
        if replicas < spec.replication_factor:
            problems.append(
                f"{spec.name}: {replicas} replicas, {spec.replication_factor} configured"
                " (JOBSVC_KAFKA_REPLICATION_FACTOR)"
            )
        config = configs.get(spec.name, {})
        insync = int(config.get("min.insync.replicas", "1"))
        if insync < spec.min_insync_replicas:
            problems.append(
                f"{spec.name}: min.insync.replicas={insync}, {spec.min_insync_replicas}"
                " configured (JOBSVC_KAFKA_MIN_INSYNC_REPLICAS)"
            )
        if config.get("unclean.leader.election.enable", "false") == "true":
            problems.append(f"{spec.name}: unclean.leader.election.enable=true")
    if problems:
        raise TopicsTooWeak("; ".join(problems))


def require_durable_topics(*, bootstrap: str, timeout: float = _ADMIN_TIMEOUT) -> None:
    """Before a worker starts: raise ``TopicsTooWeak`` if a configured topic is weaker than
    the settings ask. A broker that does not answer in time is logged, not raised: the
    worker starts and waits for it, as it would for a broker that goes away later."""
    try:
        verify_topics(bootstrap=bootstrap, topics=configured_topics(), timeout=timeout)
    except TopicsUnavailable as exc:
        logger.warning("topics not checked: %s", exc)


def _topic_configs(
    admin: AdminClient, names: list[str], timeout: float
) -> dict[str, dict[str, str]]:
    if not names:
        return {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in names]
    futures = admin.describe_configs(resources, request_timeout=timeout)
    return {
        resource.name: {key: entry.value for key, entry in future.result(timeout).items()}
        for resource, future in futures.items()
    }
