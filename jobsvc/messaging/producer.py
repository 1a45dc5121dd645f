"""A Kafka producer that publishes batches and says which messages the broker acknowledged.

Idempotent (``enable.idempotence``, ``acks=all``): a message the broker acknowledged is
durable on it, and librdkafka's internal retries never write one twice. Thread-safe: many
threads share one producer. A thread of its own serves the delivery reports, so a batch
can be sent without waiting (``send``, which reports through a callback once every
message of the batch is acknowledged or failed) or waited for (``publish``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from confluent_kafka import KafkaException
from confluent_kafka import Producer as KafkaProducer

from jobsvc.messaging.client_security import kafka_connection_config, kafka_security_config

logger = logging.getLogger(__name__)

_ANY_PARTITION = -1  # librdkafka's RD_KAFKA_PARTITION_UA: the partitioner picks (by key)

_POLL_SECONDS = 0.05  # how long one wait for delivery reports blocks
_PURGE_REPORT_SECONDS = 1.0  # for the reports of messages purged at close
# A topic's partition count is read from the broker's metadata at most this often (seconds)
# while known, and tried again this soon while not (no broker, no topic).
_PARTITIONS_TTL = 30.0
_PARTITIONS_RETRY = 5.0
_METADATA_TIMEOUT = 1.0  # seconds one metadata request may block the caller


class _Batch:
    """The delivery reports of one batch of messages."""

    def __init__(self, size: int, on_done: Callable[[list[int]], None] | None) -> None:
        self._pending = set(range(size))
        self._failed: list[int] = []
        self._on_done = on_done
        self._lock = threading.Lock()
        self.done = threading.Event()
        if not size:
            self._finish()

    def reporter(self, index: int) -> Callable:
        def report(error, _message) -> None:
            with self._lock:
                self._pending.discard(index)
                if error is not None:
                    self._failed.append(index)
                finished = not self._pending
            if finished:
                self._finish()

        return report

    def unacknowledged(self) -> list[int]:
        """Failed or not reported yet."""
        with self._lock:
            return sorted({*self._failed, *self._pending})

    def _finish(self) -> None:
        self.done.set()
        if self._on_done is not None:
            self._on_done(sorted(self._failed))


class Producer(Protocol):
    """What a worker sends messages through: a BatchProducer, or what wraps some
    (jobsvc.messaging.renewing_producer)."""

    def send(
        self,
        topic: str,
        messages: Sequence[tuple[bytes, bytes]],
        *,
        on_done: Callable[[list[int]], None],
        timeout: float,
        partitions: Sequence[int | None] | None = None,
    ) -> object: ...

    def partition_count(self, topic: str) -> int | None: ...

    def publish(
        self,
        topic: str,
        messages: Sequence[tuple[bytes, bytes]],
        *,
        timeout: float,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> list[int]: ...


class BatchProducer:
    def __init__(self, *, bootstrap: str, client_id: str, config: dict | None = None) -> None:
        self._producer = KafkaProducer(
            {
                "bootstrap.servers": bootstrap,
                **kafka_security_config(),
                **kafka_connection_config(),
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
        self._closed = threading.Event()
        self._partitions: dict[str, tuple[int | None, float]] = {}  # topic: (count, until)
        # Set when producing raised (a fatal error of the idempotent producer, for one):
        # the owner should replace this producer.
        self.broken = False
        self._reporter = threading.Thread(
            target=self._serve_reports, name=f"kafka-reports-{client_id}", daemon=True
        )
        self._reporter.start()

    def send(
        self,
        topic: str,
        messages: Sequence[tuple[bytes, bytes]],
        *,
        on_done: Callable[[list[int]], None] | None = None,
        timeout: float,
        partitions: Sequence[int | None] | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> _Batch:
        """Publish (key, value) pairs without waiting for the broker.

        ``partitions``: the partition of each message (see ``partition_count``); None
        there, or None for all: it goes to its key's.

        ``on_done`` gets the indexes of the messages that failed, once every message is
        acknowledged or failed; it runs on the reporting thread (or on this one, for
        messages that failed at once) and must be quick. Every message is reported:
        librdkafka fails one it could not deliver within ``message.timeout.ms``.
        ``timeout`` bounds the wait for room in a full local queue; a message that finds
        none fails. ``headers`` go on every message of the batch.
        """
        batch = _Batch(len(messages), on_done)
        deadline = time.monotonic() + timeout
        for index, (key, value) in enumerate(messages):
            target = _ANY_PARTITION if partitions is None else partitions[index]
            target = _ANY_PARTITION if target is None else target
            self._produce(topic, key, value, target, headers, batch.reporter(index), deadline)
        return batch

    def partition_count(self, topic: str) -> int | None:
        """How many partitions ``topic`` has (the broker's metadata, cached); None when
        that is not known now (no broker, no such topic)."""
        now = time.monotonic()
        count, until = self._partitions.get(topic, (None, 0.0))
        if now < until:
            return count
        count = None
        try:
            metadata = self._producer.list_topics(topic, timeout=_METADATA_TIMEOUT)
        except KafkaException as exc:
            logger.debug("no metadata for %s: %s", topic, exc)
        else:
            described = metadata.topics.get(topic)
            if described is not None and described.error is None and described.partitions:
                count = len(described.partitions)
        self._partitions[topic] = (count, now + (_PARTITIONS_TTL if count else _PARTITIONS_RETRY))
        return count

    def broker_answers(self, timeout: float) -> bool:
        """Whether a broker answers a metadata request within ``timeout`` seconds now
        (not from a cache: a probe of the link to the cluster)."""
        try:
            self._producer.list_topics(timeout=timeout)
        except KafkaException:
            return False
        return True

    def publish(
        self,
        topic: str,
        messages: Sequence[tuple[bytes, bytes]],
        *,
        timeout: float,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> list[int]:
        """Publish (key, value) pairs; return the indexes NOT acknowledged within timeout."""
        deadline = time.monotonic() + timeout
        batch = self.send(topic, messages, timeout=timeout, headers=headers)
        batch.done.wait(max(0.0, deadline - time.monotonic()))
        unacknowledged = batch.unacknowledged()
        if unacknowledged:
            logger.warning(
                "%d of %d messages to %s not acknowledged",
                len(unacknowledged),
                len(messages),
                topic,
            )
        return unacknowledged

    def _produce(
        self,
        topic: str,
        key: bytes,
        value: bytes,
        partition: int,
        headers: Sequence[tuple[str, bytes]],
        callback,
        deadline: float,
    ) -> None:
        extra = {"headers": list(headers)} if headers else {}
        while True:
            try:
                self._producer.produce(
                    topic, value=value, key=key, partition=partition, on_delivery=callback, **extra
                )
                return
            except BufferError:
                # The local queue is full: wait for delivery reports to make room.
                if time.monotonic() > deadline:
                    callback(KafkaException("local queue full"), None)
                    return
                time.sleep(_POLL_SECONDS / 10)
            except KafkaException as exc:
                if not self.broken:
                    logger.error("producing to %s failed: %s", topic, exc)
                self.broken = True
                callback(exc, None)
                return

    def _serve_reports(self) -> None:
        while not self._closed.is_set():
            self._producer.poll(_POLL_SECONDS)

    def close(self, timeout: float = 10.0) -> None:
        """Wait up to ``timeout`` for unsent messages (their reports arrive), then stop.

        Every message sent is reported, even one still unsent at the deadline: it is purged
        from librdkafka's queues and reported failed. A caller counting unacknowledged
        messages (the dispatcher's cap on them) would otherwise wait for it forever, and
        its job would stay queued until the sweeper's lease ran out.
        """
        remaining = self._producer.flush(timeout)
        if remaining:
            logger.warning("%d messages were still unsent at close: reported failed", remaining)
            self._producer.purge(in_queue=True, in_flight=True, blocking=False)
            self._producer.flush(_PURGE_REPORT_SECONDS)  # serves the purged messages' reports
        self._closed.set()
        self._reporter.join(timeout=1.0)
