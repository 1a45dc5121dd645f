"""A read-only look at the executors' consumer group and the topics, for operators.

The broker says who is in the group and which partitions each member holds
(DescribeGroups), what the group has committed (OffsetFetch) and where each partition
ends (ListOffsets). Lag is the end offset less the committed one. A broker that cannot be
reached within the timeout raises ``MessagingUnavailable``.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from jobsvc.messaging.client_security import kafka_security_config


class MessagingUnavailable(Exception):
    """The broker did not answer in time, or answered with an error."""


@dataclass(frozen=True)
class GroupMember:
    client_id: str  # the executor's worker id (its Kafka client.id)
    host: str
    partitions: list[int]


@dataclass(frozen=True)
class PartitionLag:
    partition: int
    committed: int | None  # None: the group has committed nothing there yet
    end: int
    lag: int


@dataclass(frozen=True)
class ConsumerGroupView:
    state: str
    members: list[GroupMember]
    partitions: list[PartitionLag]

    @property
    def total_lag(self) -> int:
        return sum(partition.lag for partition in self.partitions)


def consumer_group_view(
    *, bootstrap: str, group_id: str, topic: str, timeout: float
) -> ConsumerGroupView:
    admin = _admin(bootstrap, timeout)
    try:
        partitions = _partitions(admin, topic, timeout)
        [described] = admin.describe_consumer_groups([group_id], request_timeout=timeout).values()
        group = described.result(timeout=timeout)
        [offsets] = admin.list_consumer_group_offsets(
            [
                ConsumerGroupTopicPartitions(
                    group_id, [TopicPartition(topic, p) for p in partitions]
                )
            ],
            request_timeout=timeout,
        ).values()
        committed = {
            tp.partition: tp.offset for tp in offsets.result(timeout=timeout).topic_partitions
        }
        ends = _offsets(admin, topic, partitions, OffsetSpec.latest(), timeout)
    except KafkaException as exc:
        raise MessagingUnavailable(f"{bootstrap}: {exc.args[0]}") from exc
    members = [
        GroupMember(
            client_id=member.client_id,
            host=member.host,
            partitions=sorted(
                tp.partition
                for tp in (member.assignment.topic_partitions if member.assignment else [])
                if tp.topic == topic
            ),
        )
        for member in group.members
    ]
    lags = []
    for partition in partitions:
        offset = committed.get(partition)
        offset = offset if offset is not None and offset >= 0 else None
        end = ends[partition]
        lags.append(PartitionLag(partition, offset, end, max(0, end - (offset or 0))))
    return ConsumerGroupView(
        state=group.state.name.lower() if group.state is not None else "unknown",
        members=sorted(members, key=lambda m: m.client_id),
        partitions=lags,
    )


def topic_message_count(*, bootstrap: str, topic: str, timeout: float) -> int:
    """Messages the topic holds now (end less start offset, summed over its partitions)."""
    admin = _admin(bootstrap, timeout)
    try:
        partitions = _partitions(admin, topic, timeout)
        ends = _offsets(admin, topic, partitions, OffsetSpec.latest(), timeout)
        starts = _offsets(admin, topic, partitions, OffsetSpec.earliest(), timeout)
    except KafkaException as exc:
        raise MessagingUnavailable(f"{bootstrap}: {exc.args[0]}") from exc
    return sum(max(0, ends[p] - starts[p]) for p in partitions)


def _admin(bootstrap: str, timeout: float) -> AdminClient:
    milliseconds = max(10, round(timeout * 1000))
    return AdminClient(
        {
            "bootstrap.servers": bootstrap,
            **kafka_security_config(),
            "socket.connection.setup.timeout.ms": str(max(1000, milliseconds)),  # its minimum
            "socket.timeout.ms": str(milliseconds),
            # A broker that cannot be reached is reported by the call that needed it (the
            # page says so); librdkafka's own connection errors on stderr add nothing.
            "log_level": 2,
        }
    )


def _partitions(admin: AdminClient, topic: str, timeout: float) -> list[int]:
    metadata = admin.list_topics(topic=topic, timeout=timeout).topics.get(topic)
    if metadata is None or metadata.error is not None:
        reason = metadata.error if metadata is not None else "not in the metadata"
        raise MessagingUnavailable(f"topic {topic}: {reason}")
    return sorted(metadata.partitions)


def _offsets(
    admin: AdminClient, topic: str, partitions: list[int], spec: OffsetSpec, timeout: float
) -> dict[int, int]:
    if not partitions:
        return {}
    futures = admin.list_offsets(
        {TopicPartition(topic, p): spec for p in partitions}, request_timeout=timeout
    )
    return {tp.partition: future.result(timeout=timeout).offset for tp, future in futures.items()}
