"""The Kafka topics each user's kafka-handler jobs may publish to (``User.kafka_topics``).

Staff grant them in the admin; a grant must be a topic of the operator's allow-list
(JOBSVC_KAFKA_HANDLER_ALLOWED_TOPICS) and never a system topic (``kafka_topic_refusals``).
The API and the executors read a user's grants through ``kafka_topics_of``, cached for
USER_HANDLER_CACHE_SECONDS: a grant or a withdrawal applies within that many seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from django.conf import settings

from jobsvc.accounts.authentication import ExpiringCache
from jobsvc.accounts.control_reads import cached_read
from jobsvc.accounts.models import User
from jobsvc.handlers.kafka import topic_refusal

_MAX_CACHED_USERS = 10_000

# Each user's granted topics, in this process (kafka_topics_of).
topics_cache = ExpiringCache(max_size=_MAX_CACHED_USERS, clock=time.monotonic)


def kafka_topic_refusals(topics: Iterable[object]) -> list[str]:
    """Why each topic that may not be granted may not be; empty when all may."""
    from jobsvc.handlers.setup import reserved_kafka_topics  # settings-dependent

    reserved = reserved_kafka_topics()
    allowed = frozenset(settings.KAFKA_HANDLER_ALLOWED_TOPICS)
    refusals = (topic_refusal(topic, allowed=allowed, reserved=reserved) for topic in topics)
    return [refusal for refusal in refusals if refusal is not None]


def kafka_topics_of(user_id: int) -> frozenset[str]:
    """The topics granted to the user (none for a user that does not exist), cached and
    kept through control database faults (``control_reads``)."""
    return cached_read(topics_cache, user_id, lambda: _granted_topics(user_id))


def _granted_topics(user_id: int) -> frozenset[str]:
    row = User.objects.using("default").filter(pk=user_id).values_list("kafka_topics").first()
    return frozenset(row[0] or ()) if row is not None else frozenset()
