"""Create the Kafka topics: jobs (partitioned for the executor group), its express topic
(scheduler_worker.express_lane) and dead letters."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from jobsvc.messaging.topics import TopicsUnavailable, ensure_topics, jobs_topics


class Command(BaseCommand):
    help = "Create the Kafka topics if they are missing (idempotent)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait")

    def handle(self, *args, **options) -> None:
        topics = jobs_topics(
            jobs_topic=settings.KAFKA_JOBS_TOPIC,
            dead_letter_topic=settings.KAFKA_DEAD_LETTER_TOPIC,
            partitions=settings.KAFKA_JOBS_PARTITIONS,
            express_topic=settings.KAFKA_EXPRESS_TOPIC,
            express_partitions=settings.KAFKA_EXPRESS_PARTITIONS,
            replication_factor=settings.KAFKA_REPLICATION_FACTOR,
        )
        try:
            ensure_topics(
                bootstrap=settings.KAFKA_BOOTSTRAP,
                topics=topics,
                timeout_seconds=options["timeout"],
            )
        except TopicsUnavailable as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write("topics ready: " + ", ".join(topic.name for topic in topics))
