"""A partition's offsets only grow within one log; an offset at or below the last one is a
new log (the topic recreated), whose commit tracking starts again.

The consumer is driven by a fake of confluent-kafka's ``Consumer`` (the port it uses:
``poll``, ``consume``, ``store_offsets``, ``assignment``); no broker is involved.
"""

from __future__ import annotations

from executor_worker.consumer import JobConsumer


class _Message:
    def __init__(self, partition: int, offset: int) -> None:
        self._partition, self._offset = partition, offset

    def error(self):
        return None

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return b"{}"


class _FakeKafkaConsumer:
    def __init__(self, offsets: list[tuple[int, int]]) -> None:
        self.pending = [_Message(p, o) for p, o in offsets]
        self.stored: list[tuple[int, int]] = []

    def subscribe(self, topics, on_assign, on_revoke) -> None:
        pass

    def poll(self, timeout):
        return self.pending.pop(0) if self.pending else None

    def consume(self, num_messages, timeout):
        taken, self.pending = self.pending[:num_messages], self.pending[num_messages:]
        return taken

    def store_offsets(self, offsets) -> None:
        self.stored += [(tp.partition, tp.offset) for tp in offsets]

    def assignment(self):
        return []


def _consumer(offsets: list[tuple[int, int]]) -> tuple[JobConsumer, _FakeKafkaConsumer]:
    fake = _FakeKafkaConsumer(offsets)
    consumer = JobConsumer(
        bootstrap="unused:9092",
        group_id="g",
        topic="jobs",
        client_id="test",
        max_uncommitted=100,
        kafka_consumer=fake,
    )
    return consumer, fake


def test_offsets_that_skip_ahead_are_all_handled_and_committed_in_order():
    consumer, fake = _consumer([(0, 3), (0, 4), (0, 9)])  # gaps are allowed by Kafka
    batch = consumer.poll_batch(max_messages=10, timeout=0)
    assert [r.offset for r in batch] == [3, 4, 9]
    consumer.handled(batch[2])
    assert fake.stored == []  # 3 and 4 are not handled yet
    consumer.handled(batch[0], batch[1])
    assert fake.stored == [(0, 10)]


def test_an_offset_that_goes_back_starts_a_new_log_whose_offsets_are_committed_alone():
    consumer, fake = _consumer([(0, 40), (0, 41), (0, 0), (0, 1)])  # recreated topic
    old_first, old_second, new_first, new_second = consumer.poll_batch(max_messages=10, timeout=0)
    assert old_first.log == old_second.log != new_first.log == new_second.log
    consumer.handled(old_first, old_second)  # the old log's: never committed
    assert fake.stored == []
    consumer.handled(new_first, new_second)
    assert fake.stored == [(0, 2)]
