"""The broker loses every message (a restart of the in-memory Tansu broker): the sweeper
makes the lost jobs due again and each still runs exactly once.

The test has a broker of its own, so restarting it cannot disturb the shared one.
"""

from __future__ import annotations

import pytest

from tests.e2e.conftest import create_topics
from tests.e2e.jobs import all_jobs, create, due_in, spec, status_counts
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

JOBS = 60
QUEUED_TIMEOUT = "3"  # seconds before an unclaimed job is dispatched again
QUEUED_TIMEOUT_LONG = 120


def test_jobs_lost_with_the_brokers_messages_are_dispatched_again_and_run_once(
    broker, make_user, start_worker, receiver, messaging
):
    # ``broker`` comes first so that it is stopped last, after the workers using it.
    create_topics(broker, messaging)
    env = {
        "JOBSVC_KAFKA_BOOTSTRAP": broker.bootstrap,
        "JOBSVC_SCHEDULER_QUEUED_TIMEOUT_SECONDS": QUEUED_TIMEOUT,
    }
    user = make_user()
    scheduler = start_worker("scheduler", "scheduler-a", env=env)
    ids: list[str] = []
    for _ in range(JOBS // 10):  # bulks of 10 land on random shards
        job = spec(due=due_in(0), handler="http", params={"url": receiver.url})
        ids += create(user.pk, [job] * 10)
    wait_until(
        lambda: status_counts()["queued"] == JOBS,
        timeout=30,
        what="every job is published (no executor runs yet)",
    )
    first_dispatch = {job.id: job.dispatched_at for job in all_jobs()}

    broker.restart()  # memory storage: every topic and message is gone
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
