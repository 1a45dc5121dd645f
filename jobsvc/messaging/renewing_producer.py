"""A BatchProducer that replaces itself when it stops working (the scheduler's and the
executor's producer)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from jobsvc.messaging.producer import BatchProducer

logger = logging.getLogger(__name__)


class RenewingProducer:
    """The worker's BatchProducer, replaced by a new one when it stops working.

    An idempotent producer is stuck for good after a fatal error (librdkafka raises one when
    the broker can no longer keep its sequence, such as an out-of-order sequence after a
    partition leader lost the producer's state): every later call raises, or every message
    fails or times out. So a producer that raised is replaced
    at once, and one that fails a whole batch is replaced at most every RENEW_INTERVAL (while
    the broker is simply down, every batch fails too, and a new producer does no harm). The
    old one is closed in the background: its last delivery reports still arrive. Failed
    messages are reported, so their owner sends them again (the dispatcher makes their jobs
    due again; the executor keeps a dead letter, or fails a kafka job's attempt); a message
    the broker did take becomes a duplicate, which its consumer drops.
    """

    RENEW_INTERVAL = 5.0  # seconds between replacements of a producer failing whole batches

    def __init__(self, make: Callable[[], BatchProducer], *, close_timeout: float) -> None:
        self._make = make
        self._close_timeout = close_timeout
        self._current = make()
        self._renewed_at = time.monotonic()
        self._lock = threading.Lock()

    @classmethod
    def publishing_within(
        cls, timeout: float, *, bootstrap: str, client_id: str
    ) -> RenewingProducer:
        """Producers whose messages fail when the broker has not acknowledged them within
        ``timeout`` seconds (their owner sends them again)."""
        config = {"message.timeout.ms": round(timeout * 1000)}
        return cls(
            lambda: BatchProducer(bootstrap=bootstrap, client_id=client_id, config=config),
            close_timeout=timeout,
        )

    def send(
        self,
        topic: str,
        messages: Sequence[tuple[bytes, bytes]],
        *,
        on_done: Callable[[list[int]], None],
        timeout: float,
        partitions: Sequence[int | None] | None = None,
    ) -> None:
        producer = self._current

        def check(failed: list[int]) -> None:
            try:
                self._check(producer, sent=len(messages), failed=failed)
            finally:
                on_done(failed)

        producer.send(topic, messages, on_done=check, timeout=timeout, partitions=partitions)
        # A producer that raised is replaced now, not when the batch's last report comes.
        self._check(producer, sent=len(messages), failed=[])

    def partition_count(self, topic: str) -> int | None:
        return self._current.partition_count(topic)

    def broker_answers(self, timeout: float) -> bool:
        return self._current.broker_answers(timeout)

    def publish(
        self,
        topic: str,
        messages: Sequence[tuple[bytes, bytes]],
        *,
        timeout: float,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> list[int]:
        producer = self._current
        failed = producer.publish(topic, messages, timeout=timeout, headers=headers)
        self._check(producer, sent=len(messages), failed=failed)
        return failed

    def _check(self, producer: BatchProducer, *, sent: int, failed: list[int]) -> None:
        """Replace the producer if it raised, or (not too often) if it failed a whole batch."""
        if producer.broken:
            self._renew(producer, at_once=True)
        elif sent and len(failed) == sent:
            self._renew(producer, at_once=False)

    def close(self) -> None:
        self._current.close(self._close_timeout)

    def _renew(self, producer: BatchProducer, *, at_once: bool) -> None:
        with self._lock:
            if self._current is not producer:
                return  # another dispatcher replaced it already
            if not at_once and time.monotonic() - self._renewed_at < self.RENEW_INTERVAL:
                return
            logger.warning(
                "replacing the Kafka producer: %s", "it raised" if at_once else "a batch failed"
            )
            self._current = self._make()
            self._renewed_at = time.monotonic()
        threading.Thread(
            target=producer.close, args=(self._close_timeout,), name="close-producer", daemon=True
        ).start()
