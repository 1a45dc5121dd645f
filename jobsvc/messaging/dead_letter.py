"""The message sent to the dead-letter topic when a job has finally failed, version 1.

It carries everything needed to investigate or replay the job: the job itself, every
attempt's error, and the timestamps. Write-only parameters (the http handler's header
values) are not in it: they show as ``***`` (``jobsvc.handlers.redaction``), so whoever
reads the topic never sees a tenant's credentials; a replay must supply them again.

Its key is the job id. A job fails for good once, so the job id identifies its dead
letter: delivery to the topic is at least once (a worker that dies after the broker
acknowledged the letter and before the failure is committed sends it again), and a
consumer drops a letter whose job id it has seen (or the topic is compacted by key).

Executors and schedulers both dead-letter (a job whose executor died on its last attempt
is failed by the scheduler's sweeper); both build the letter with ``DeadLetter.final`` and
publish through ``dead_letters_publish``, which also counts ``jobsvc_jobs_dead_lettered``
in either process.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from prometheus_client import Counter

from jobsvc.handlers.redaction import public_params
from jobsvc.messaging.job_message import utc_iso

SCHEMA_VERSION = 1

JOBS_DEAD_LETTERED = Counter(
    "jobsvc_jobs_dead_lettered", "Jobs sent to the dead-letter topic (acknowledged by the broker)"
)


class FailedJob(Protocol):
    """The job a final failure ends, as its owner read it from the shard."""

    job_id: str
    user_id: int
    handler: str
    handler_params: dict[str, Any]
    message: str
    max_attempts: int
    execute_at: datetime
    created_at: datetime
    attempt_errors: list[dict[str, Any]]


class Publisher(Protocol):
    """What publishing dead letters needs of a producer."""

    def publish(
        self, topic: str, messages: Sequence[tuple[bytes, bytes]], *, timeout: float
    ) -> list[int]: ...


@dataclass(frozen=True)
class DeadLetter:
    job_id: str
    shard_id: int
    user_id: int
    handler: str
    handler_params: dict[str, Any]
    message: str
    attempts: int
    max_attempts: int
    reason: str  # "exhausted" (every attempt failed) or "permanent" (an error not worth retrying)
    attempt_errors: list[dict[str, Any]]
    execute_at: datetime
    created_at: datetime
    failed_at: datetime

    @classmethod
    def final(
        cls, job: FailedJob, *, shard_id: int, attempt: int, error: str, failed_at: datetime
    ) -> DeadLetter:
        """The letter of ``job``, failed for good on ``attempt`` with ``error``."""
        return cls(
            job_id=job.job_id,
            shard_id=shard_id,
            user_id=job.user_id,
            handler=job.handler,
            handler_params=job.handler_params,
            message=job.message,
            attempts=attempt,
            max_attempts=job.max_attempts,
            reason="exhausted" if attempt >= job.max_attempts else "permanent",
            attempt_errors=[*job.attempt_errors, {"attempt": attempt, "error": error}],
            execute_at=job.execute_at,
            created_at=job.created_at,
            failed_at=failed_at,
        )

    def encode(self) -> bytes:
        return json.dumps(
            {
                "v": SCHEMA_VERSION,
                "job_id": self.job_id,
                "shard_id": self.shard_id,
                "user_id": self.user_id,
                "handler": self.handler,
                "handler_params": public_params(self.handler_params),
                "message": self.message,
                "attempts": self.attempts,
                "max_attempts": self.max_attempts,
                "reason": self.reason,
                "errors": self.attempt_errors,
                "execute_at": utc_iso(self.execute_at),
                "created_at": utc_iso(self.created_at),
                "failed_at": utc_iso(self.failed_at),
            },
            separators=(",", ":"),
        ).encode()


def dead_letters_publish(
    *, producer: Publisher, topic: str, letters: Sequence[DeadLetter], timeout: float
) -> bool:
    """Publish the letters, keyed by job id; True if the broker acknowledged every one.

    Counted only then: a caller that gets False keeps the failures and sends them all
    again, so counting a partly acknowledged batch would count its letters twice.
    """
    if not letters:
        return True
    messages = [(letter.job_id.encode(), letter.encode()) for letter in letters]
    if producer.publish(topic, messages, timeout=timeout):
        return False
    JOBS_DEAD_LETTERED.inc(len(letters))
    return True
