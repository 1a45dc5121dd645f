"""Topics are created as durable as configured, and one that is weaker is refused: by
``verify_topics``, and by a worker, which will not start against it."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from django.conf import settings

from jobsvc.messaging.topics import TopicSpec, TopicsTooWeak, ensure_topics, verify_topics
from tests.waiting import wait_until


def _name() -> str:
    return f"test-topics-{uuid.uuid4().hex[:8]}"


def test_a_topic_created_here_has_the_durability_of_its_spec():
    spec = TopicSpec(_name(), partitions=2, replication_factor=1, min_insync_replicas=1)
    ensure_topics(bootstrap=settings.KAFKA_BOOTSTRAP, topics=[spec])
    verify_topics(bootstrap=settings.KAFKA_BOOTSTRAP, topics=[spec], timeout=10)


def test_a_missing_topic_and_one_with_fewer_replicas_than_configured_are_named():
    existing = TopicSpec(_name(), partitions=1, replication_factor=1)
    ensure_topics(bootstrap=settings.KAFKA_BOOTSTRAP, topics=[existing])
    stronger = TopicSpec(existing.name, partitions=1, replication_factor=3, min_insync_replicas=2)
    missing = TopicSpec(_name(), partitions=1, replication_factor=1)

    with pytest.raises(TopicsTooWeak) as raised:
        verify_topics(bootstrap=settings.KAFKA_BOOTSTRAP, topics=[stronger, missing], timeout=10)
    message = str(raised.value)
    assert f"{existing.name}: 1 replicas, 3 configured" in message
    assert f"{existing.name}: min.insync.replicas=1, 2 configured" in message
    assert f"{missing.name}: does not exist" in message


def test_a_topic_created_by_hand_with_unclean_leader_election_is_refused():
    name = _name()
    admin = AdminClient({"bootstrap.servers": settings.KAFKA_BOOTSTRAP})
    config = {"unclean.leader.election.enable": "true"}
    admin.create_topics([NewTopic(name, 1, 1, config=config)])[name].result(timeout=10)
    wait_until(lambda: name in admin.list_topics(timeout=5).topics, timeout=10, what="created")

    with pytest.raises(TopicsTooWeak, match=r"unclean\.leader\.election\.enable=true"):
        verify_topics(
            bootstrap=settings.KAFKA_BOOTSTRAP, topics=[TopicSpec(name, 1, 1)], timeout=10
        )
