"""Reading the test's dead-letter topic back."""

from __future__ import annotations

import json
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from django.conf import settings

from jobsvc.messaging.producer import BatchProducer
from tests.e2e.conftest import Messaging

MARKER_KEY = b"e2e-end-marker"  # dead_letters' own messages, not dead letters


def dead_letters(
    messaging: Messaging, *, timeout: float = 10.0, bootstrap: str | None = None
) -> list[dict]:
    """Every message on the test's dead-letter topic so far, decoded, in order.

    The end is found with a marker this function publishes and then reads back: whatever
    the broker acknowledged before it lies before it. (The test broker's high watermark
    counts batches, not messages, so it cannot say where the topic ends.)
    """
    marker = uuid.uuid4().hex.encode()
    producer = BatchProducer(
        bootstrap=bootstrap or settings.KAFKA_BOOTSTRAP, client_id="e2e-marker"
    )
    try:
        topic = messaging.dead_letter_topic
        assert producer.publish(topic, [(MARKER_KEY, marker)], timeout=timeout) == []
    finally:
        producer.close()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap or settings.KAFKA_BOOTSTRAP,
            "group.id": f"dead-letter-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(messaging.dead_letter_topic, 0, OFFSET_BEGINNING)])
        letters: list[dict] = []
        deadline = time.monotonic() + timeout
        while True:
            assert time.monotonic() < deadline, "the marker never came back"
            record = consumer.poll(0.5)
            if record is None or record.error() is not None:
                continue
            if record.key() != MARKER_KEY:
                letters.append(json.loads(record.value()))
            elif record.value() == marker:
                return letters
    finally:
        consumer.close()
