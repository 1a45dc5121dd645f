"""The ``kafka`` handler: publish the job's message to the Kafka topic its parameters name.

Parameters: ``{"topic": "<name>"}``. Which topics a job may name is decided twice:

- the operator's allow-list (``allowed_topics``, JOBSVC_KAFKA_HANDLER_ALLOWED_TOPICS): the
  topics the handler may publish to at all;
- the job owner's own topics (``topics_of(user_id)``, ``User.kafka_topics``, granted by
  staff): a tenant publishes only to the topics granted to it, so no tenant can write
  into a topic another tenant's consumers read.

The system's own topics can never be allowed: ``reserved_topics`` (the jobs and
dead-letter topics) and anything starting with ``__`` (Kafka's internal topics). A
configuration that allows one stops the process at start-up (``HandlerConfigError``).

The record: key = the job id (so a job's messages keep their order within a partition),
value = compact JSON ``{"job_id", "user_id", "attempt", "message"}``, and the header
USER_ID_HEADER with the owner's user id, so a consumer can tell whose job sent it without
parsing the value. It is published through the shared
``jobsvc.messaging.producer.BatchProducer`` (idempotent, ``acks=all``); one the broker did
not acknowledge in time is a ``RetryableError`` (``HandlerTimeout`` once the attempt's
deadline has passed).

At least once: a record that was not acknowledged in time may still be delivered later
(the producer keeps it queued until its own ``message.timeout.ms``), and an executor can
die after the acknowledgement but before recording success; either way the next attempt
publishes again, as the next attempt. Consumers drop duplicates by ``job_id``, the
record's key (``attempt`` differs between the copies).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, ClassVar, Protocol

from jobsvc.handlers.base import JobContext
from jobsvc.handlers.errors import (
    HandlerConfigError,
    HandlerTimeout,
    InvalidHandlerParams,
    RetryableError,
)

DEFAULT_MAX_TIMEOUT = 10.0  # seconds to wait for the broker, whatever the job's timeout

USER_ID_HEADER = "jobsvc-user-id"  # the job owner's user id, as decimal ASCII
INTERNAL_PREFIX = "__"  # Kafka's own topics (__consumer_offsets, __transaction_state...)

_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")  # what Kafka accepts as a topic name

# The topics a user may publish to (User.kafka_topics); the caller caches.
TopicsOf = Callable[[int], Collection[str]]


class Publisher(Protocol):
    """What the handler needs of ``BatchProducer``."""

    def publish(
        self,
        topic: str,
        messages: Sequence[tuple[bytes, bytes]],
        *,
        timeout: float,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> list[int]: ...


def topic_refusal(
    topic: object, *, allowed: Collection[str], reserved: Collection[str]
) -> str | None:
    """Why ``topic`` may not be granted to a user; None when it may."""
    if not isinstance(topic, str) or not _TOPIC_NAME.fullmatch(topic):
        return f"{topic!r} is not a Kafka topic name"
    if topic in reserved or topic.startswith(INTERNAL_PREFIX):
        return f"{topic} is a system topic"
    if topic not in allowed:
        return f"{topic} is not in JOBSVC_KAFKA_HANDLER_ALLOWED_TOPICS"
    return None


class KafkaHandler:
    name: ClassVar[str] = "kafka"

    def __init__(
        self,
        *,
        allowed_topics: Collection[str],
        topics_of: TopicsOf,
        reserved_topics: Collection[str] = (),
        producer: Publisher | None = None,  # None where jobs are only validated (the API)
        max_timeout: float = DEFAULT_MAX_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(allowed_topics, str):
            raise HandlerConfigError("allowed_topics must be a list of topics, not one string")
        bad = sorted(t for t in allowed_topics if not _TOPIC_NAME.fullmatch(str(t)))
        if bad:
            raise HandlerConfigError(f"allowed_topics: not Kafka topic names: {bad}")
        reserved = sorted(
            topic
            for topic in allowed_topics
            if topic in reserved_topics or topic.startswith(INTERNAL_PREFIX)
        )
        if reserved:
            raise HandlerConfigError(f"allowed_topics must not include system topics: {reserved}")
        if not max_timeout > 0:
            raise HandlerConfigError(f"max_timeout must be > 0 seconds, got {max_timeout}")
        self._allowed_topics = frozenset(allowed_topics)
        self._topics_of = topics_of
        self._producer = producer
        self._max_timeout = max_timeout
        self._clock = clock

    def validate_params(self, params: Any) -> dict[str, Any]:
        if not isinstance(params, dict):
            raise InvalidHandlerParams("Must be a JSON object with a topic.")
        extra = sorted(map(str, set(params) - {"topic"}))
        if extra:
            raise InvalidHandlerParams(
                f"Unknown parameter(s): {', '.join(extra)}; the kafka handler takes only topic."
            )
        topic = params.get("topic")
        if not isinstance(topic, str) or not topic:
            raise InvalidHandlerParams("topic is required: the Kafka topic to publish to.")
        if topic not in self._allowed_topics:
            raise InvalidHandlerParams(
                f"topic: {topic!r} is not in the kafka handler's allow-list."
            )
        return {"topic": topic}

    def check_owner(self, params: dict[str, Any], *, user_id: int) -> None:
        """Refuse (``InvalidHandlerParams``) a topic not granted to the job's owner."""
        topic = params["topic"]
        if topic not in self._topics_of(user_id):
            raise InvalidHandlerParams(
                f"topic: {topic!r} is not one of the topics this account may publish to "
                "(staff grant them)."
            )

    def handle(self, job: JobContext) -> None:
        params = self.validate_params(job.params)
        self.check_owner(params, user_id=job.user_id)
        topic = params["topic"]
        if self._producer is None:
            raise HandlerConfigError("the kafka handler has no producer in this process")
        timeout = min(job.remaining(clock=self._clock), self._max_timeout)
        if timeout <= 0:
            raise HandlerTimeout(f"topic {topic}: the attempt's deadline passed before publishing")
        value = json.dumps(
            {
                "job_id": job.job_id,
                "user_id": job.user_id,
                "attempt": job.attempt,
                "message": job.message,
            },
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode()
        unacknowledged = self._producer.publish(
            topic,
            [(job.job_id.encode(), value)],
            timeout=timeout,
            headers=[(USER_ID_HEADER, str(job.user_id).encode())],
        )
        if not unacknowledged:
            return
        if self._clock() >= job.deadline:
            raise HandlerTimeout(f"topic {topic}: not acknowledged before the attempt's deadline")
        raise RetryableError(f"topic {topic}: not acknowledged within {timeout:g} seconds")
