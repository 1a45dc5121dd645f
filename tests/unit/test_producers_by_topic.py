"""A topic with a producer of its own gets its messages sent, counted and closed by it."""

from __future__ import annotations

import pytest

from jobsvc.messaging.producers_by_topic import ProducersByTopic

pytestmark = pytest.mark.unit


class Recording:
    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.sent: list[tuple[str, int]] = []
        self.closed = False

    def send(self, topic, messages, *, on_done, timeout, partitions=None) -> None:
        self.sent.append((topic, len(messages)))
        on_done([])

    def publish(self, topic, messages, *, timeout, headers=()) -> list[int]:
        self.sent.append((topic, len(messages)))
        return []

    def partition_count(self, topic) -> int:
        return self.partitions

    def close(self) -> None:
        self.closed = True


def test_each_topic_goes_through_its_own_producer_and_the_rest_through_the_default():
    default, express = Recording(partitions=12), Recording(partitions=4)
    producers = ProducersByTopic(default, {"jobs.express": express})
    done = []
    producers.send("jobs", [(b"k", b"v")] * 3, on_done=done.append, timeout=1.0)
    producers.send("jobs.express", [(b"k", b"v")], on_done=done.append, timeout=1.0)
    assert producers.publish("dead", [(b"k", b"v")] * 2, timeout=1.0) == []
    assert default.sent == [("jobs", 3), ("dead", 2)]
    assert express.sent == [("jobs.express", 1)]
    assert done == [[], []]
    assert producers.partition_count("jobs.express") == 4
    assert producers.partition_count("jobs") == 12
    producers.close()
    assert default.closed and express.closed
