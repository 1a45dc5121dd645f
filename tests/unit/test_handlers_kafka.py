"""The kafka handler: the operator's allow-list, each user's granted topics, the system
topics no configuration may allow, and how broker acknowledgements become outcomes."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from jobsvc.handlers.base import JobContext
from jobsvc.handlers.errors import (
    HandlerConfigError,
    HandlerTimeout,
    InvalidHandlerParams,
    PermanentError,
    RetryableError,
)
from jobsvc.handlers.kafka import USER_ID_HEADER, KafkaHandler, topic_refusal
from tests.fake_clock import FakeClock


class FakeProducer:
    """Acknowledges everything, unless told to drop; can let time pass while publishing."""

    def __init__(self, clock: FakeClock, *, acknowledge: bool = True, takes: float = 0.0):
        self.clock = clock
        self.acknowledge = acknowledge
        self.takes = takes
        self.published: list[tuple[str, list[tuple[bytes, bytes]], float]] = []
        self.headers: list[list[tuple[str, bytes]]] = []

    def publish(
        self,
        topic: str,
        messages: Sequence[tuple[bytes, bytes]],
        *,
        timeout: float,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> list[int]:
        self.published.append((topic, list(messages), timeout))
        self.headers.append(list(headers))
        self.clock.now += min(self.takes, timeout)
        return [] if self.acknowledge else list(range(len(messages)))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)


GRANTS = {7: {"events", "audit.v1"}, 8: {"audit.v1"}}  # user id: topics granted


def make_handler(clock: FakeClock, producer: FakeProducer | None = None, **kwargs) -> KafkaHandler:
    kwargs.setdefault("allowed_topics", ["events", "audit.v1"])
    kwargs.setdefault("reserved_topics", ["jobs", "jobs.dead-letter"])
    kwargs.setdefault("topics_of", lambda user_id: GRANTS.get(user_id, set()))
    return KafkaHandler(producer=producer, clock=clock, **kwargs)


def job(clock: FakeClock, *, timeout: float = 30.0, user_id: int = 7, **params) -> JobContext:
    return JobContext(
        job_id="2bH5Yk3sQeM1pZ0x9LwVnR4tUa7",
        user_id=user_id,
        shard_id=1,
        attempt=2,
        message="héllo",
        params=params or {"topic": "events"},
        deadline=clock() + timeout,
    )


# --- Parameters --------------------------------------------------------------------------


def test_an_allowed_topic_is_accepted(clock):
    assert make_handler(clock).validate_params({"topic": "audit.v1"}) == {"topic": "audit.v1"}


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"topic": "jobs"}, "not in the kafka handler's allow-list"),
        ({"topic": "other"}, "not in the kafka handler's allow-list"),
        ({"topic": "Events"}, "not in the kafka handler's allow-list"),
        ({}, "topic is required"),
        ({"topic": ""}, "topic is required"),
        ({"topic": ["events"]}, "topic is required"),
        ({"topic": "events", "key": "k"}, "Unknown parameter(s): key"),
        (None, "JSON object"),
    ],
)
def test_a_topic_outside_the_allow_list_or_malformed_params_are_refused(clock, params, words):
    with pytest.raises(InvalidHandlerParams) as caught:
        make_handler(clock).validate_params(params)

    assert words in str(caught.value)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"allowed_topics": ["events", "jobs"]}, "system topics"),
        ({"allowed_topics": ["events", "jobs.dead-letter"]}, "system topics"),
        ({"allowed_topics": ["__consumer_offsets"]}, "system topics"),
        ({"allowed_topics": ["__anything"]}, "system topics"),
        ({"allowed_topics": "events"}, "not one string"),
        ({"allowed_topics": ["bad topic"]}, "not Kafka topic names"),
        ({"max_timeout": 0}, "max_timeout"),
    ],
)
def test_a_bad_configuration_stops_the_handler_at_construction(clock, kwargs, words):
    with pytest.raises(HandlerConfigError, match=words):
        make_handler(clock, **kwargs)


# --- Publishing --------------------------------------------------------------------------


def test_the_message_is_published_keyed_by_job_id_with_its_owners_user_id(clock):
    producer = FakeProducer(clock)

    make_handler(clock, producer).handle(job(clock))

    [(topic, [(key, value)], _timeout)] = producer.published
    assert topic == "events"
    assert key == b"2bH5Yk3sQeM1pZ0x9LwVnR4tUa7"
    assert json.loads(value) == {
        "job_id": "2bH5Yk3sQeM1pZ0x9LwVnR4tUa7",
        "user_id": 7,
        "attempt": 2,
        "message": "héllo",
    }
    assert producer.headers == [[(USER_ID_HEADER, b"7")]]


# --- Each user's topics ------------------------------------------------------------------


def test_a_topic_not_granted_to_the_owner_is_refused_at_create(clock):
    handler = make_handler(clock)
    params = handler.validate_params({"topic": "events"})

    handler.check_owner(params, user_id=7)
    with pytest.raises(InvalidHandlerParams, match="not one of the topics this account"):
        handler.check_owner(params, user_id=8)
    with pytest.raises(InvalidHandlerParams):
        handler.check_owner(params, user_id=99)  # no grants at all


def test_a_job_whose_owner_lost_the_topic_since_create_fails_without_publishing(clock):
    producer = FakeProducer(clock)

    with pytest.raises(PermanentError, match="not one of the topics"):
        make_handler(clock, producer).handle(job(clock, user_id=8, topic="events"))

    assert producer.published == []


@pytest.mark.parametrize(
    ("topic", "words"),
    [
        ("jobs", "system topic"),
        ("jobs.dead-letter", "system topic"),
        ("__consumer_offsets", "system topic"),
        ("elsewhere", "not in JOBSVC_KAFKA_HANDLER_ALLOWED_TOPICS"),
        ("bad topic", "not a Kafka topic name"),
        (3, "not a Kafka topic name"),
    ],
)
def test_a_topic_that_may_not_be_granted_says_why(topic, words):
    allowed = {"events", "jobs", "__consumer_offsets"}  # as a misconfiguration would
    reserved = {"jobs", "jobs.dead-letter"}

    assert words in topic_refusal(topic, allowed=allowed, reserved=reserved)
    assert topic_refusal("events", allowed=allowed, reserved=reserved) is None


def test_the_broker_wait_is_bounded_by_the_attempts_time_left_and_the_cap(clock):
    producer = FakeProducer(clock)
    handler = make_handler(clock, producer, max_timeout=10.0)

    handler.handle(job(clock, timeout=3.0))
    handler.handle(job(clock, timeout=300.0))

    assert [timeout for _, _, timeout in producer.published] == [3.0, 10.0]


def test_an_unacknowledged_message_is_retryable(clock):
    producer = FakeProducer(clock, acknowledge=False, takes=1.0)

    with pytest.raises(RetryableError) as caught:
        make_handler(clock, producer).handle(job(clock))

    assert not isinstance(caught.value, HandlerTimeout)


def test_an_unacknowledged_message_at_the_deadline_is_a_timeout(clock):
    producer = FakeProducer(clock, acknowledge=False, takes=60.0)

    with pytest.raises(HandlerTimeout):
        make_handler(clock, producer, max_timeout=60.0).handle(job(clock, timeout=5.0))


def test_nothing_is_published_once_the_deadline_has_passed(clock):
    producer = FakeProducer(clock)
    late = job(clock, timeout=1.0)
    clock.now += 2.0

    with pytest.raises(HandlerTimeout):
        make_handler(clock, producer).handle(late)

    assert producer.published == []


def test_a_topic_removed_from_the_allow_list_since_create_fails_permanently(clock):
    producer = FakeProducer(clock)
    handler = make_handler(clock, producer, allowed_topics=["audit.v1"])

    with pytest.raises(PermanentError):
        handler.handle(job(clock, topic="events"))

    assert producer.published == []


def test_a_handler_built_without_a_producer_validates_but_cannot_publish(clock):
    handler = make_handler(clock, producer=None)

    assert handler.validate_params({"topic": "events"})
    with pytest.raises(HandlerConfigError, match="no producer"):
        handler.handle(job(clock))
