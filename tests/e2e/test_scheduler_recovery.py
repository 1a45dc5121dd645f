"""The broker and its messages: a broker killed and started again loses nothing, and jobs
whose messages are lost all the same (the jobs topic deleted and created again) are made
due again by the sweeper; each job runs exactly once either way.

Each test has a broker of its own, so stopping it cannot disturb the shared one.
"""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from jobsvc.messaging.consumer_group import topic_message_count
from tests.e2e.conftest import create_topics
from tests.e2e.jobs import all_jobs, create, due_in, spec, status_counts
from tests.waiting import wait_until
from tools.bench.processes import WorkerProcess

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

JOBS = 60
QUEUED_TIMEOUT = "3"  # seconds before an unclaimed job is dispatched again
QUEUED_TIMEOUT_LONG = 120


def _publish_without_executors(
    make_user, start_worker, receiver, env, jobs_topic
) -> tuple[list[str], WorkerProcess]:
    user = make_user()
    scheduler = start_worker("scheduler", "scheduler-a", env=env)
    ids: list[str] = []
    for _ in range(JOBS // 10):  # bulks of 10 land on random shards
        job = spec(due=due_in(0), handler="http", params={"url": receiver.url})
        ids += create(user.pk, [job] * 10)
    wait_until(
        lambda: status_counts()["queued"] == JOBS,
        timeout=30,
        what="every job is claimed for dispatch (no executor runs yet)",
    )
    wait_until(
        lambda: _messages(env["JOBSVC_KAFKA_BOOTSTRAP"], jobs_topic) == JOBS,
        timeout=30,
        what="every job's message is in the jobs topic",
    )
    return ids, scheduler


def test_a_broker_killed_and_started_again_keeps_every_message(
    broker, make_user, start_worker, receiver, messaging
):
    # ``broker`` comes first so that it is stopped last, after the workers using it.
    create_topics(broker, messaging)
    env = {
        "JOBSVC_KAFKA_BOOTSTRAP": broker.bootstrap,
        "JOBSVC_SCHEDULER_QUEUED_TIMEOUT_SECONDS": str(QUEUED_TIMEOUT_LONG),
    }
    ids, scheduler = _publish_without_executors(
        make_user, start_worker, receiver, env, messaging.jobs_topic
    )
    first_dispatch = {job.id: job.dispatched_at for job in all_jobs()}

    broker.process.kill_group()  # SIGKILL: no clean shutdown, no flush of its own
    broker.stop()
    broker.start()
    start_worker("executor", "executor-a", env=env)

    wait_until(lambda: status_counts()["succeeded"] == JOBS, timeout=60, what="every job succeeded")
    assert receiver.count_by_job() == dict.fromkeys(ids, 1)
    jobs = all_jobs()
    assert all(job.dispatched_at == first_dispatch[job.id] for job in jobs), "not sent again"
    assert "unclaimed" not in scheduler.log(), "the sweeper was not needed"


def test_jobs_whose_messages_are_lost_are_dispatched_again_and_run_once(
    broker, make_user, start_worker, receiver, messaging
):
    create_topics(broker, messaging)
    env = {
        "JOBSVC_KAFKA_BOOTSTRAP": broker.bootstrap,
        "JOBSVC_SCHEDULER_QUEUED_TIMEOUT_SECONDS": QUEUED_TIMEOUT,
    }
    ids, scheduler = _publish_without_executors(
        make_user, start_worker, receiver, env, messaging.jobs_topic
    )
    first_dispatch = {job.id: job.dispatched_at for job in all_jobs()}

    _delete_topic(broker.bootstrap, messaging.jobs_topic)  # every message is gone
    create_topics(broker, messaging)
    start_worker("executor", "executor-a", env=env)

    wait_until(lambda: status_counts()["succeeded"] == JOBS, timeout=60, what="every job succeeded")
    deliveries = receiver.count_by_job()
    assert set(deliveries) == set(ids)
    assert set(deliveries.values()) == {1}, "a job ran more than once"
    jobs = all_jobs()
    assert all(job.dispatched_at > first_dispatch[job.id] for job in jobs), "dispatched again"
    # A second attempt is only ever the http handler's retry of a failed request.
    assert all(job.attempts == 1 + len(job.attempt_errors) for job in jobs)
    assert "unclaimed" in scheduler.log(), "the sweeper made the lost jobs due again"


def _messages(bootstrap: str, jobs_topic: str) -> int:
    return topic_message_count(bootstrap=bootstrap, topic=jobs_topic, timeout=5)


def _delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=30)
    wait_until(
        lambda: topic not in admin.list_topics(timeout=5).topics,
        timeout=30,
        what=f"{topic} is deleted",
    )


def test_jobs_claimed_while_the_broker_is_down_run_once_it_is_back_without_the_sweeper(
    broker, make_user, start_worker, receiver, messaging
):
    # The sweeper would wait QUEUED_TIMEOUT_LONG: only the scheduler's release of messages
    # the producer failed (after PUBLISH_TIMEOUT) can make the jobs due again before that.
    create_topics(broker, messaging)
    broker.stop()
    env = {
        "JOBSVC_KAFKA_BOOTSTRAP": broker.bootstrap,
        "JOBSVC_SCHEDULER_PUBLISH_TIMEOUT_SECONDS": "1",
        "JOBSVC_SCHEDULER_QUEUED_TIMEOUT_SECONDS": str(QUEUED_TIMEOUT_LONG),
    }
    user = make_user()
    scheduler = start_worker("scheduler", "scheduler-a", env=env)
    job = spec(due=due_in(0), handler="http", params={"url": receiver.url})
    ids = create(user.pk, [job] * 10)
    wait_until(
        lambda: "the broker did not take their messages" in scheduler.log(),
        timeout=30,
        what="the scheduler releases jobs whose messages the broker never took",
    )

    broker.start()
    create_topics(broker, messaging)
    start_worker("executor", "executor-a", env=env)

    wait_until(
        lambda: status_counts()["succeeded"] == len(ids),
        timeout=QUEUED_TIMEOUT_LONG / 2,
        what="every job succeeded",
    )
    assert receiver.count_by_job() == dict.fromkeys(ids, 1)
    assert "unclaimed" not in scheduler.log(), "the sweeper was not needed"
