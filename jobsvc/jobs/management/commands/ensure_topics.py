"""Create the Kafka topics: jobs (partitioned for the executor group) and dead letters."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from jobsvc.messaging.topics import TopicSpec, TopicsUnavailable, ensure_topics


class Command(BaseCommand):
    help = "Create the Kafka topics if they are missing (idempotent)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait")

    def handle(self, *args, **options) -> None:
        replication = settings.KAFKA_REPLICATION_FACTOR
        topics = [
            TopicSpec(settings.KAFKA_JOBS_TOPIC, settings.KAFKA_JOBS_PARTITIONS, replication),
            TopicSpec(settings.KAFKA_DEAD_LETTER_TOPIC, 1, replication),
        ]
        try:
            ensure_topics(
                bootstrap=settings.KAFKA_BOOTSTRAP,
                topics=topics,
                timeout_seconds=options["timeout"],
            )
        except TopicsUnavailable as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write("topics ready: " + ", ".join(topic.name for topic in topics))
