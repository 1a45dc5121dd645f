"""BatchProducer: against a broker that never answers, every message sent is reported;
against the stack's broker, a batch can be sent to one partition of the topic's."""

from __future__ import annotations

import threading
import time
import uuid

from confluent_kafka import Consumer, TopicPartition
from django.conf import settings

from jobsvc.messaging.producer import BatchProducer
from jobsvc.messaging.topics import TopicSpec, ensure_topics
from tests.waiting import wait_until
from tools.devstack.ports import free_port


def test_messages_still_unsent_at_close_are_reported_failed():
    # Nothing listens on the port: the messages wait in librdkafka's queue for a broker
    # for longer than the close gives them (message.timeout.ms is a minute).
    producer = BatchProducer(
        bootstrap=f"127.0.0.1:{free_port()}",
        client_id="test-unsent-at-close",
        config={"message.timeout.ms": 60_000, "log_level": 0},
    )
    reported: list[list[int]] = []
    done = threading.Event()

    def on_done(failed: list[int]) -> None:
        reported.append(failed)
        done.set()

    producer.send("jobs", [(b"k", b"v")] * 3, on_done=on_done, timeout=1.0)
    producer.close(timeout=0.5)

    assert done.wait(5.0), "the batch was never reported: a counter of unacknowledged leaks"
    assert reported == [[0, 1, 2]]


def test_messages_sent_to_a_partition_are_all_in_that_partition_whatever_their_keys():
    topic = f"test-partitions-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap=settings.KAFKA_BOOTSTRAP, topics=[TopicSpec(topic, 3, 1)])
    producer = BatchProducer(bootstrap=settings.KAFKA_BOOTSTRAP, client_id="test-partitions")
    try:
        assert producer.partition_count(topic) == 3
        done = threading.Event()
        failures: list[list[int]] = []

        def on_done(failed: list[int]) -> None:
            failures.append(failed)
            done.set()

        batch = [(f"key-{i}".encode(), b"v") for i in range(20)]  # keys of every partition
        producer.send(topic, batch, on_done=on_done, timeout=10.0, partitions=[2] * len(batch))
        assert done.wait(10.0)
        assert failures == [[]], "the broker acknowledged every message"
    finally:
        producer.close()

    consumer = Consumer({"bootstrap.servers": settings.KAFKA_BOOTSTRAP, "group.id": topic})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    partitions: list[int] = []
    try:

        def read_all() -> bool:
            partitions.extend(m.partition() for m in consumer.consume(100, 0.5) if not m.error())
            return len(partitions) >= len(batch)

        wait_until(read_all, timeout=20.0, what="the batch read back")
    finally:
        consumer.close()
    assert partitions == [2] * len(batch)


def test_without_a_broker_the_partition_count_is_unknown_and_asking_does_not_hang():
    producer = BatchProducer(
        bootstrap=f"127.0.0.1:{free_port()}",
        client_id="test-partitions-no-broker",
        config={"log_level": 0},
    )
    try:
        started = time.monotonic()
        assert producer.partition_count("jobs") is None
        assert producer.partition_count("jobs") is None  # remembered for a while: no wait
        assert time.monotonic() - started < 10.0  # a metadata request waits 1 s at most
    finally:
        producer.close(timeout=0.1)
