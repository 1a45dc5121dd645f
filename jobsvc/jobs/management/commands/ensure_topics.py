"""Create the Kafka topics: jobs (partitioned for the executor group) and dead letters;
then check that each one, new or old, is as durable as configured (replicas,
min.insync.replicas)."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from jobsvc.messaging.topics import (
    TopicsTooWeak,
    TopicsUnavailable,
    configured_topics,
    ensure_topics,
    verify_topics,
)


class Command(BaseCommand):
    help = "Create the Kafka topics if they are missing (idempotent)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait")

    def handle(self, *args, **options) -> None:
        topics = configured_topics()
        try:
            ensure_topics(
                bootstrap=settings.KAFKA_BOOTSTRAP,
                topics=topics,
                timeout_seconds=options["timeout"],
            )
            verify_topics(
                bootstrap=settings.KAFKA_BOOTSTRAP, topics=topics, timeout=options["timeout"]
            )
        except (TopicsUnavailable, TopicsTooWeak) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write("topics ready: " + ", ".join(topic.name for topic in topics))
