"""The message sent to the dead-letter topic when a job has finally failed, version 1.

It carries everything needed to investigate or replay the job: the job itself, every
attempt's error, and the timestamps.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobsvc.messaging.job_message import utc_iso

SCHEMA_VERSION = 1


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

    def encode(self) -> bytes:
        return json.dumps(
            {
                "v": SCHEMA_VERSION,
                "job_id": self.job_id,
                "shard_id": self.shard_id,
                "user_id": self.user_id,
                "handler": self.handler,
                "handler_params": self.handler_params,
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
