"""The handler registry of this process, built from the Django settings.

The API builds its registry at start-up (``jobsvc.wsgi``, and the system check below for
``manage.py check`` and ``runserver``), the executor in ``run_executor``: a bad handler
configuration stops the process there, never fails requests or jobs later.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.conf import settings
from django.core import checks

from jobsvc.handlers.errors import HandlerConfigError
from jobsvc.handlers.registry import HandlerRegistry
from jobsvc.handlers.resolution import budgeted_resolver


def reserved_kafka_topics() -> frozenset[str]:
    """The system's own topics, which the kafka handler may never publish to."""
    from jobsvc.messaging.topics import configured_topics  # imports the Kafka client

    return frozenset(topic.name for topic in configured_topics())


def registry_from_settings(
    *, producer: Any | None = None, resolver: Any | None = None
) -> HandlerRegistry:
    """Every configured handler. The executor passes the producer the kafka handler uses:
    its registry runs jobs, so a per-user read the control database cannot answer means
    the job did not start (``control_reads.before_start``). The API passes a resolver that
    keeps to each request's budget (``resolution``); there such a read answers 503."""
    from jobsvc.accounts.control_reads import before_start
    from jobsvc.accounts.kafka_topics import kafka_topics_of
    from jobsvc.accounts.webhook_secrets import signing_secrets_of

    runs_jobs = producer is not None
    http: dict[str, Any] = {
        "signing_secrets": before_start(signing_secrets_of) if runs_jobs else signing_secrets_of,
        "allowed_hosts": settings.HTTP_HANDLER_ALLOWED_HOSTS,
        "allow_private_addresses": settings.HTTP_HANDLER_ALLOW_PRIVATE_ADDRESSES,
        "max_timeout": settings.HTTP_HANDLER_MAX_TIMEOUT,
        "response_excerpt_bytes": settings.ATTEMPT_RESPONSE_EXCERPT_BYTES,
    }
    if resolver is not None:
        http["resolver"] = resolver
    options: dict[str, dict[str, Any]] = {
        "http": http,
        "kafka": {
            "allowed_topics": settings.KAFKA_HANDLER_ALLOWED_TOPICS,
            "topics_of": before_start(kafka_topics_of) if runs_jobs else kafka_topics_of,
            "reserved_topics": reserved_kafka_topics(),
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
    return registry_from_settings(resolver=budgeted_resolver())


@checks.register()
def check_handler_configuration(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """``manage.py check`` (and ``runserver``, ``migrate``): the handlers can be built."""
    try:
        registry_from_settings()
    except HandlerConfigError as exc:
        return [checks.Error(f"handler configuration: {exc}", id="jobsvc.E001")]
    return []
