"""Every dead letter, the executor's or the scheduler's, is published keyed by its job id
and counted in ``jobsvc_jobs_dead_lettered`` once the broker acknowledged it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from prometheus_client import REGISTRY

from jobsvc.messaging.dead_letter import DeadLetter, dead_letters_publish

NOW = datetime(2030, 1, 1, tzinfo=UTC)


class FakeProducer:
    def __init__(self, *, fail: set[int] = frozenset()) -> None:
        self.fail = fail
        self.sent: list[tuple[str, bytes, bytes]] = []

    def publish(self, topic, messages, *, timeout):
        self.sent += [(topic, key, value) for key, value in messages]
        return sorted(self.fail)


def letter(job_id: str) -> DeadLetter:
    return DeadLetter(
        job_id=job_id,
        shard_id=1,
        user_id=7,
        handler="http",
        handler_params={},
        message="hi",
        attempts=3,
        max_attempts=3,
        reason="exhausted",
        attempt_errors=[],
        execute_at=NOW,
        created_at=NOW,
        failed_at=NOW,
    )


def dead_lettered() -> float:
    return REGISTRY.get_sample_value("jobsvc_jobs_dead_lettered_total") or 0.0


def test_acknowledged_letters_are_keyed_by_job_id_and_counted():
    producer = FakeProducer()
    before = dead_lettered()

    assert dead_letters_publish(
        producer=producer, topic="dlq", letters=[letter("a"), letter("b")], timeout=1
    )

    assert [(topic, key) for topic, key, _ in producer.sent] == [("dlq", b"a"), ("dlq", b"b")]
    assert [json.loads(value)["job_id"] for _, _, value in producer.sent] == ["a", "b"]
    assert dead_lettered() == before + 2


def test_a_batch_not_wholly_acknowledged_is_not_counted():
    """The caller sends the whole batch again: counting now would count it twice."""
    before = dead_lettered()

    assert not dead_letters_publish(
        producer=FakeProducer(fail={1}), topic="dlq", letters=[letter("a"), letter("b")], timeout=1
    )

    assert dead_lettered() == before


def test_no_letters_sends_nothing():
    producer = FakeProducer()
    assert dead_letters_publish(producer=producer, topic="dlq", letters=[], timeout=1)
    assert producer.sent == []
