"""The API's shapes as typed, immutable values."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled"})


def parse_time(value: str | None) -> datetime | None:
    """An API timestamp (ISO 8601, ``Z`` or an offset) as an aware datetime."""
    if value is None:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def format_time(value: datetime) -> str:
    if value.tzinfo is None:
        raise ValueError("execute_at needs a time zone (an aware datetime)")
    return value.isoformat()


@dataclass(frozen=True)
class Token:
    token: str
    expire: datetime


@dataclass(frozen=True)
class JobSpec:
    """One job to create. ``None`` leaves a field to the server's default."""

    message: str
    execute_at: datetime
    handler: str | None = None
    handler_params: dict[str, Any] | None = None
    max_attempts: int | None = None
    timeout_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "message": self.message,
            "execute_at": format_time(self.execute_at),
        }
        for name in ("handler", "handler_params", "max_attempts", "timeout_seconds"):
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        return body


@dataclass(frozen=True)
class Job:
    """A job as the API returns it. Fields a newer server adds are kept in ``extra``."""

    id: str
    user_id: int
    message: str
    status: str
    execute_at: datetime
    shard_id: int
    handler: str
    handler_params: dict[str, Any]
    attempts: int
    max_attempts: int
    timeout_seconds: float
    due_at: datetime
    last_error: str | None
    attempt_errors: list[dict[str, Any]]
    created_at: datetime
    updated_at: datetime
    dispatched_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Job:
        known = {f.name for f in fields(cls)} - {"extra"}
        values = {name: data[name] for name in known}
        for name in TIME_FIELDS:
            values[name] = parse_time(values[name])
        values["timeout_seconds"] = float(values["timeout_seconds"])
        return cls(**values, extra={k: v for k, v in data.items() if k not in known})

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        for name in TIME_FIELDS:
            if data[name] is not None:
                data[name] = data[name].isoformat()
        return {**data, **self.extra}


TIME_FIELDS = (
    "execute_at",
    "due_at",
    "created_at",
    "updated_at",
    "dispatched_at",
    "started_at",
    "finished_at",
)
