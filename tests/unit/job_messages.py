"""Job messages as an executor's consumer hands them over, and their attempts' outcomes,
for unit tests."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from executor_worker.claims import Attempt
from executor_worker.consumer import Received
from jobsvc.messaging.job_message import JobMessage

_ids = itertools.count()
_offsets = itertools.count()


def received_job(
    user: int,
    *,
    shard: int = 0,
    handler: str = "noop",
    due_in: float = -1.0,
    weight: float = 1.0,
) -> Received:
    """A message of a new job of ``user``, due ``due_in`` seconds from now (default: a
    second ago)."""
    now = datetime.now(UTC)
    job = JobMessage(
        job_id=f"{next(_ids):027d}",
        shard_id=shard,
        user_id=user,
        attempt=1,
        epoch=1,
        due_at=now + timedelta(seconds=due_in),
        dispatched_at=now,
        handler=handler,
        weight=weight,
    )
    return Received(partition=0, offset=next(_offsets), value=job.encode())


def attempt_of(message: JobMessage, *, timeout: float = 10.0) -> Attempt:
    """The attempt a claim of ``message`` would start."""
    now = datetime.now(UTC)
    return Attempt(
        job_id=message.job_id,
        user_id=message.user_id,
        shard_id=message.shard_id,
        attempt=message.attempt,
        max_attempts=3,
        timeout_seconds=timeout,
        handler=message.handler,
        handler_params={},
        message="",
        execute_at=now,
        due_at=now,
        created_at=now,
        attempt_errors=[],
    )
