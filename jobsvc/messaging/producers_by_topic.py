"""Producers of their own for some topics, behind the interface of one.

A Kafka producer sends each broker its requests over one connection, and a broker answers
a connection's requests in order. A scheduler's rounds each produce a thousand messages
to the jobs topic; a job sent to the express topic through the same producer waits for the
requests ahead of it on that connection. A producer of its own (its own connections) lets
the express topic's few messages go beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from jobsvc.messaging.producer import Producer


class _Producer(Producer, Protocol):
    def close(self) -> None: ...


class ProducersByTopic:
    def __init__(self, default: _Producer, own: Mapping[str, _Producer]) -> None:
        """``own``: the producer of each topic that has one; ``default``: the others'."""
        self._default = default
        self._own = dict(own)

    def send(
        self,
        topic: str,
        messages: Sequence[tuple[bytes, bytes]],
        *,
        on_done: Callable[[list[int]], None],
        timeout: float,
        partitions: Sequence[int] | None = None,
    ) -> None:
        self._of(topic).send(
            topic, messages, on_done=on_done, timeout=timeout, partitions=partitions
        )

    def partition_count(self, topic: str) -> int | None:
        return self._of(topic).partition_count(topic)

    def publish(
        self,
        topic: str,
        messages: Sequence[tuple[bytes, bytes]],
        *,
        timeout: float,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> list[int]:
        return self._of(topic).publish(topic, messages, timeout=timeout, headers=headers)

    def close(self) -> None:
        for producer in (*self._own.values(), self._default):
            producer.close()

    def _of(self, topic: str) -> _Producer:
        return self._own.get(topic, self._default)
