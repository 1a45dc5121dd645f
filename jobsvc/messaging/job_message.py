"""The message a scheduler publishes to the jobs topic for each dispatch, version 1.

    {"v": 1, "job_id": "...", "shard_id": 2, "user_id": 7, "attempt": 1, "epoch": 12,
     "due_at": "2030-01-01T00:00:00Z", "dispatched_at": "2030-01-01T00:00:00.012000Z",
     "weight": 4.0, "priority": 5, "handler": "http"}

``attempt`` is the attempt this dispatch starts (1 for the first run). An executor runs
the job only if it can claim that attempt in the shard database, so a duplicate message,
or one from an earlier attempt, changes nothing. The job's payload is not in the message:
the claim reads it from the database, which is the one source of truth.

``weight`` is the user's ``job_weight`` when the job was dispatched and ``priority`` the
job's: executors start the jobs they hold in weighted fair order across users, and each
user's by priority (executor_worker.start_order). Both are optional (1.0 and the default
priority when missing), so messages of older schedulers still decode.

``handler`` names the job's handler, also optional (None when missing): executors start
jobs whose handler needs a thread only as threads come free, so the fair order holds for
them too; a job without it is treated as one that may need a thread. The claim still
reads the handler from the database.

Times are RFC 3339 with a UTC offset ("Z" for UTC); a time without one is malformed.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import NamedTuple

import orjson

from jobsvc.jobs.priorities import PRIORITY_DEFAULT
from jobsvc.sharding.ids import JOB_ID_LENGTH

SCHEMA_VERSION = 1
# The highest attempt number jobs.attempts (a PostgreSQL integer) can hold. A larger one,
# or a job id that is not 27 ASCII letters and digits (one with a NUL byte), would make
# the claim statement fail for every message in its batch, again on every retry: such a
# message is malformed.
MAX_ATTEMPT = 2**31 - 1


class MalformedJobMessage(ValueError):
    """The bytes are not a job message this code understands."""


class JobMessage(NamedTuple):
    """One dispatch of a job. Every dispatch encodes one and every claim decodes one, so
    it is a tuple and its JSON goes through orjson: together they cost a fifth of what a
    frozen dataclass and the standard library's json did (``make bench`` CPU per job)."""

    job_id: str
    shard_id: int
    user_id: int
    attempt: int
    epoch: int
    due_at: datetime
    dispatched_at: datetime
    weight: float = 1.0
    priority: int = PRIORITY_DEFAULT
    handler: str | None = None

    def encode(self) -> bytes:
        data = {
            "v": SCHEMA_VERSION,
            "job_id": self.job_id,
            "shard_id": self.shard_id,
            "user_id": self.user_id,
            "attempt": self.attempt,
            "epoch": self.epoch,
            "due_at": self.due_at,
            "dispatched_at": self.dispatched_at,
            "weight": self.weight,
            "priority": self.priority,
        }
        if self.handler is not None:
            data["handler"] = self.handler
        # Times as RFC 3339 with their offset, "Z" for UTC (aware datetimes only).
        return orjson.dumps(data, option=orjson.OPT_UTC_Z)

    @classmethod
    def decode(cls, raw: bytes | None) -> JobMessage:
        try:
            data = orjson.loads(raw or b"")
        except orjson.JSONDecodeError as exc:  # NaN and numbers past a float's range too
            raise MalformedJobMessage(f"not JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("v") != SCHEMA_VERSION:
            raise MalformedJobMessage(f"not a version-{SCHEMA_VERSION} job message")
        job_id = _typed(data, "job_id", str)
        if not (len(job_id) == JOB_ID_LENGTH and job_id.isascii() and job_id.isalnum()):
            raise MalformedJobMessage("job_id is not a job id")
        attempt = _typed(data, "attempt", int)
        if not 1 <= attempt <= MAX_ATTEMPT:
            raise MalformedJobMessage(f"attempt must be between 1 and {MAX_ATTEMPT}")
        weight = _weight(data.get("weight", 1.0))
        priority = data.get("priority", PRIORITY_DEFAULT)
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise MalformedJobMessage("priority must be an int")
        handler = data.get("handler")
        if handler is not None and not isinstance(handler, str):
            raise MalformedJobMessage("handler must be a string")
        return cls(
            job_id,
            _typed(data, "shard_id", int),
            _typed(data, "user_id", int),
            attempt,
            _typed(data, "epoch", int),
            _time(data, "due_at"),
            _time(data, "dispatched_at"),
            weight,
            priority,
            handler,
        )


def _typed(data: dict, key: str, kind: type):
    value = data.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise MalformedJobMessage(f"{key} must be a {kind.__name__}")
    return value


def _time(data: dict, key: str) -> datetime:
    value = _typed(data, key, str)
    try:
        time = datetime.fromisoformat(value)
    except ValueError as exc:
        raise MalformedJobMessage(f"{key}: {exc}") from None
    if time.tzinfo is None:
        raise MalformedJobMessage(f"{key} has no UTC offset")
    return time


def _weight(value) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            weight = float(value)
        except OverflowError:  # an integer beyond a float's range
            weight = math.inf
        if math.isfinite(weight) and weight > 0:
            return weight
    raise MalformedJobMessage("weight must be a positive, finite number")


def utc_iso(value: datetime) -> str:
    """An ISO 8601 UTC time ending in Z, as every message writes times."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
