"""The jobs-topic consumer: at-least-once, with offsets committed only for handled messages.

Modelled on confluent-kafka-python's verifiable consumer: ``enable.auto.offset.store`` is
off and an offset is stored only when its message and every earlier one in the partition
are handled (jobs finish out of order, so a per-partition tracker finds the contiguous
handled prefix). Stored offsets are committed every second, synchronously when partitions
are revoked, and before close. A message whose handling was interrupted is delivered
again; the executor's claim drops it if its attempt already ran.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Received:
    partition: int
    offset: int
    value: bytes | None


class _PartitionProgress:
    """Offsets received from one partition, in order, and which of them are handled."""

    def __init__(self) -> None:
        self.outstanding: deque[int] = deque()
        self.handled: set[int] = set()

    def receive(self, offset: int) -> None:
        self.outstanding.append(offset)

    def handle(self, offset: int) -> int | None:
        """Mark handled; return the next offset to commit if the handled prefix grew."""
        self.handled.add(offset)
        commit_from = None
        while self.outstanding and self.outstanding[0] in self.handled:
            done = self.outstanding.popleft()
            self.handled.discard(done)
            commit_from = done + 1
        return commit_from


class JobConsumer:
    def __init__(
        self,
        *,
        bootstrap: str,
        group_id: str,
        topic: str,
        client_id: str,
        session_timeout_ms: int = 6000,
        max_poll_interval_ms: int = 30000,
    ) -> None:
        self.topic = topic
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group_id,
                "client.id": client_id,
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 1000,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": session_timeout_ms,
                "max.poll.interval.ms": max_poll_interval_ms,
                "enable.partition.eof": False,
                # Due jobs should start within milliseconds: do not let a fetch idle long.
                "fetch.wait.max.ms": 20,
            }
        )
        self._progress: dict[int, _PartitionProgress] = {}
        self._lock = threading.Lock()
        self._paused = False
        self._consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def poll_batch(self, *, max_messages: int, timeout: float) -> list[Received]:
        batch: list[Received] = []
        for message in self._consumer.consume(num_messages=max_messages, timeout=timeout):
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    logger.warning("consumer error: %s", error)
                continue
            batch.append(Received(message.partition(), message.offset(), message.value()))
        with self._lock:
            for received in batch:
                progress = self._progress.get(received.partition)
                if progress is None:
                    progress = self._progress[received.partition] = _PartitionProgress()
                progress.receive(received.offset)
        return batch

    def handled(self, *received: Received) -> None:
        """These messages' outcomes are durable: their offsets may be committed.

        One call for a whole batch stores each partition's new offset once.
        """
        commits: dict[int, int] = {}
        with self._lock:
            for message in received:
                progress = self._progress.get(message.partition)
                commit_from = progress.handle(message.offset) if progress is not None else None
                if commit_from is not None:
                    commits[message.partition] = commit_from
        if commits:
            offsets = [TopicPartition(self.topic, p, offset) for p, offset in commits.items()]
            try:
                self._consumer.store_offsets(offsets=offsets)
            except KafkaException as exc:  # a partition was revoked meanwhile
                logger.info("offsets %s not stored: %s", commits, exc)

    def lag(self) -> dict[int, int]:
        """Messages between our position and each assigned partition's end (cached ends)."""
        lags: dict[int, int] = {}
        try:
            for position in self._consumer.position(self._consumer.assignment()):
                _, high = self._consumer.get_watermark_offsets(position, cached=True)
                if position.offset >= 0 and high >= 0:
                    lags[position.partition] = max(0, high - position.offset)
        except KafkaException as exc:
            logger.debug("lag unavailable: %s", exc)
        return lags

    def pause(self) -> None:
        if not self._paused:
            self._consumer.pause(self._consumer.assignment())
            self._paused = True

    def resume(self) -> None:
        if self._paused:
            self._consumer.resume(self._consumer.assignment())
            self._paused = False

    def commit(self) -> None:
        try:
            self._consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                logger.warning("commit failed: %s", exc)

    def close(self) -> None:
        self.commit()
        self._consumer.close()

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        logger.info("assigned partitions %s", [p.partition for p in partitions])
        self._paused = False

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        logger.info("revoking partitions %s", [p.partition for p in partitions])
        self.commit()
        with self._lock:
            for partition in partitions:
                self._progress.pop(partition.partition, None)
