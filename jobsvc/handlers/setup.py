"""The handler registry of this process, built from the Django settings."""

from __future__ import annotations

from functools import cache
from typing import Any

from django.conf import settings

from jobsvc.handlers.registry import HandlerRegistry


def registry_from_settings(*, producer: Any | None = None) -> HandlerRegistry:
    """Every configured handler; the executor passes the producer the kafka handler uses."""
    options: dict[str, dict[str, Any]] = {
        "http": {
            "secret": settings.HTTP_HANDLER_SECRET,
            "allowed_hosts": settings.HTTP_HANDLER_ALLOWED_HOSTS,
            "allow_private_addresses": settings.HTTP_HANDLER_ALLOW_PRIVATE_ADDRESSES,
            "max_timeout": settings.HTTP_HANDLER_MAX_TIMEOUT,
            "response_excerpt_bytes": settings.ATTEMPT_RESPONSE_EXCERPT_BYTES,
        },
        "kafka": {
            "allowed_topics": settings.KAFKA_HANDLER_ALLOWED_TOPICS,
            "reserved_topics": [settings.KAFKA_JOBS_TOPIC, settings.KAFKA_DEAD_LETTER_TOPIC],
            "producer": producer,
            "max_timeout": settings.KAFKA_HANDLER_MAX_TIMEOUT,
        },
    }
    paths = settings.JOB_HANDLERS
    return HandlerRegistry(
        paths, options={name: options[name] for name in options if name in paths}
    )


@cache
def validation_registry() -> HandlerRegistry:
    """The API's registry: used to check parameters at create time, never to run a job."""
    return registry_from_settings()
