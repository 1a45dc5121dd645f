"""The ``kafka`` handler: publish the job's message to the Kafka topic its parameters name.

Parameters: ``{"topic": "<name>"}``; the topic must be in the handler's allow-list. The
system's own topics (``reserved_topics``: the jobs and dead-letter topics) can never be
allowed: a user who could write there could forge job messages.

The record: key = the job id (so a job's messages keep their order within a partition),
value = compact JSON ``{"job_id", "attempt", "message"}``. It is published through the
shared ``jobsvc.messaging.producer.BatchProducer`` (idempotent, ``acks=all``); one the
broker did not acknowledge in time is a ``RetryableError`` (``HandlerTimeout`` once the
attempt's deadline has passed).

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

_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")  # what Kafka accepts as a topic name


class Publisher(Protocol):
    """What the handler needs of ``BatchProducer``."""

    def publish(
        self, topic: str, messages: Sequence[tuple[bytes, bytes]], *, timeout: float
    ) -> list[int]: ...


class KafkaHandler:
    name: ClassVar[str] = "kafka"

    def __init__(
        self,
        *,
        allowed_topics: Collection[str],
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
        reserved = sorted(set(allowed_topics) & set(reserved_topics))
        if reserved:
            raise HandlerConfigError(f"allowed_topics must not include system topics: {reserved}")
        if not max_timeout > 0:
            raise HandlerConfigError(f"max_timeout must be > 0 seconds, got {max_timeout}")
        self._allowed_topics = frozenset(allowed_topics)
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

    def handle(self, job: JobContext) -> None:
        topic = self.validate_params(job.params)["topic"]
        if self._producer is None:
            raise HandlerConfigError("the kafka handler has no producer in this process")
        timeout = min(job.remaining(clock=self._clock), self._max_timeout)
        if timeout <= 0:
            raise HandlerTimeout(f"topic {topic}: the attempt's deadline passed before publishing")
        value = json.dumps(
            {"job_id": job.job_id, "attempt": job.attempt, "message": job.message},
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode()
        unacknowledged = self._producer.publish(
            topic, [(job.job_id.encode(), value)], timeout=timeout
        )
        if not unacknowledged:
            return
        if self._clock() >= job.deadline:
            raise HandlerTimeout(f"topic {topic}: not acknowledged before the attempt's deadline")
        raise RetryableError(f"topic {topic}: not acknowledged within {timeout:g} seconds")
