"""A Kafka producer that publishes a batch and says which messages the broker acknowledged.

Idempotent (``enable.idempotence``, ``acks=all``): a message the broker acknowledged is
durable on it, and librdkafka's internal retries never write one twice. Thread-safe: many
shard dispatchers share one producer, each waiting only for its own batch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from confluent_kafka import KafkaException
from confluent_kafka import Producer as KafkaProducer

logger = logging.getLogger(__name__)

_POLL_SECONDS = 0.05  # how long one wait for delivery reports blocks


class BatchProducer:
    def __init__(self, *, bootstrap: str, client_id: str, config: dict | None = None) -> None:
        self._producer = KafkaProducer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "batch.num.messages": 10_000,
                "queue.buffering.max.messages": 1_000_000,
                "message.timeout.ms": 30_000,
                **(config or {}),
            }
        )
        self._lock = threading.Lock()

    def publish(
        self, topic: str, messages: Sequence[tuple[bytes, bytes]], *, timeout: float
    ) -> list[int]:
        """Publish (key, value) pairs; return the indexes NOT acknowledged within timeout."""
        pending = set(range(len(messages)))
        failed: list[int] = []
        done = threading.Event()
        if not messages:
            return []

        def on_delivery(index: int):
            def report(error, _message) -> None:
                with self._lock:
                    pending.discard(index)
                    if error is not None:
                        failed.append(index)
                    if not pending:
                        done.set()

            return report

        deadline = time.monotonic() + timeout
        for index, (key, value) in enumerate(messages):
            self._produce(topic, key, value, on_delivery(index), deadline)
        while not done.is_set() and time.monotonic() < deadline:
            self._producer.poll(_POLL_SECONDS)
        with self._lock:
            unacknowledged = sorted(set(failed) | pending)
        if unacknowledged:
            logger.warning(
                "%d of %d messages to %s not acknowledged",
                len(unacknowledged),
                len(messages),
                topic,
            )
        return unacknowledged

    def _produce(self, topic: str, key: bytes, value: bytes, callback, deadline: float) -> None:
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=callback)
                return
            except BufferError:
                # The local queue is full: serve delivery reports to make room.
                if time.monotonic() > deadline:
                    callback(KafkaException("local queue full"), None)
                    return
                self._producer.poll(_POLL_SECONDS)

    def close(self, timeout: float = 10.0) -> None:
        remaining = self._producer.flush(timeout)
        if remaining:
            logger.warning("%d messages were still unsent at close", remaining)
