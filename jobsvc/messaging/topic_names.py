"""Names of what goes with the jobs topic and the executors' consumer group (no Kafka
client here: settings import it)."""

from __future__ import annotations


def express_topic_of(jobs_topic: str) -> str:
    """The express topic beside ``jobs_topic`` (scheduler_worker.express_lane), unless
    JOBSVC_KAFKA_EXPRESS_TOPIC names another."""
    return f"{jobs_topic}.express"


def express_group_of(group_id: str) -> str:
    """The executors' consumer group of the express topic, beside their group ``group_id``."""
    return f"{group_id}.express"
