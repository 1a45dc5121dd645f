"""Names of the topics that go with a jobs topic (no Kafka client here: settings import it)."""

from __future__ import annotations


def express_topic_of(jobs_topic: str) -> str:
    """The express topic beside ``jobs_topic`` (scheduler_worker.express_lane), unless
    JOBSVC_KAFKA_EXPRESS_TOPIC names another."""
    return f"{jobs_topic}.express"
