"""The API's shapes as typed, immutable values."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
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
    """One job to create, due at ``execute_at`` or ``delay_seconds`` after the API receives
    it (exactly one of them). ``None`` leaves a field to the server's default."""

    message: str
    execute_at: datetime | None = None
    handler: str | None = None
    handler_params: dict[str, Any] | None = None
    max_attempts: int | None = None
    timeout_seconds: float | None = None
    priority: int | None = None  # 1-9: among the user's own due jobs, higher first
    delay_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        if (self.execute_at is None) == (self.delay_seconds is None):
            raise ValueError("give exactly one of execute_at and delay_seconds")
        body: dict[str, Any] = {"message": self.message}
        if self.execute_at is not None:
            body["execute_at"] = format_time(self.execute_at)
        for name in (
            "delay_seconds",
            "handler",
            "handler_params",
            "max_attempts",
            "timeout_seconds",
            "priority",
        ):
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
    # 1-9, higher first; a server older than priorities sends none: all had the default.
    priority: int = 5
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Job:
        values, extra = _split(cls, data)
        for name in TIME_FIELDS:
            values[name] = parse_time(values[name])
        values["timeout_seconds"] = float(values["timeout_seconds"])
        return cls(**values, extra=extra)

    def to_json(self) -> dict[str, Any]:
        return _to_json(self, TIME_FIELDS)


@dataclass(frozen=True)
class Attempt:
    """One attempt of a job, from its history. ``outcome``: succeeded, retried, failed,
    timed_out, lost, or running (the job's current attempt, unfinished)."""

    attempt: int
    outcome: str
    started_at: datetime | None
    finished_at: datetime | None
    duration_seconds: float | None
    error: str | None
    http_status: int | None
    response_excerpt: str | None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Attempt:
        values, extra = _split(cls, data)
        for name in ("started_at", "finished_at"):
            values[name] = parse_time(values[name])
        return cls(**values, extra=extra)

    def to_json(self) -> dict[str, Any]:
        return _to_json(self, ("started_at", "finished_at"))


@dataclass(frozen=True)
class WebhookSecret:
    """The secret the caller's webhooks are signed with (Standard Webhooks, ``whsec_...``),
    and until when the replaced one signs too after a rotation (None: none does)."""

    secret: str
    created_at: datetime
    previous_expires_at: datetime | None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WebhookSecret:
        values, extra = _split(cls, data)
        for name in ("created_at", "previous_expires_at"):
            values[name] = parse_time(values[name])
        return cls(**values, extra=extra)

    def to_json(self) -> dict[str, Any]:
        return _to_json(self, ("created_at", "previous_expires_at"))


@dataclass(frozen=True)
class Account:
    """The caller's account (GET /api/v1/me). ``limits``: max_unfinished_jobs,
    create_rate_per_second, create_burst_jobs, max_stored_bytes (None: no limit);
    ``usage``: unfinished_jobs, unfinished_jobs_exact, stored_bytes."""

    id: int
    username: str
    job_weight: float
    is_staff: bool
    limits: dict[str, Any]
    usage: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Account:
        values, extra = _split(cls, data)
        return cls(**values, extra=extra)

    def to_json(self) -> dict[str, Any]:
        return _to_json(self, ())


def _split(cls: type, data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``data``'s fields of ``cls`` (those with a default may be missing) and the rest."""
    known = {f.name: f for f in fields(cls) if f.name != "extra"}
    values = {
        name: data[name] if name in data or f.default is MISSING else data.get(name, f.default)
        for name, f in known.items()
    }
    return values, {k: v for k, v in data.items() if k not in known}


def _to_json(value: Any, time_fields: tuple[str, ...]) -> dict[str, Any]:
    data = {f.name: getattr(value, f.name) for f in fields(value) if f.name != "extra"}
    for name in time_fields:
        if data[name] is not None:
            data[name] = data[name].isoformat()
    return {**data, **value.extra}


TIME_FIELDS = (
    "execute_at",
    "due_at",
    "created_at",
    "updated_at",
    "dispatched_at",
    "started_at",
    "finished_at",
)
