"""What an executor does with the messages on the jobs topic, whatever they are.

These tests publish job messages themselves (no scheduler), so each message is exactly
what the test says: a duplicate, a stale attempt, one for a cancelled job, or garbage.
A test knows the executor has dealt with every message once the group's committed
offsets reach the end of each partition (found by reading the test's messages back):
offsets are committed only after a message's outcome is durable.
"""

from __future__ import annotations

import json

import pytest

from jobsvc.jobs.changes import job_cancel
from tests.e2e.jobs_topic import HANDLED_TIMEOUT, job, message, queued_job
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)


def test_a_duplicate_message_runs_the_handler_once(make_user, start_worker, receiver, jobs_topic):
    user = make_user()
    job_id = queued_job(user.pk, receiver.url)
    first = message(job_id, user.pk, attempt=1)
    jobs_topic.publish((job_id, first), (job_id, first))

    start_worker("executor", "executor-a")
    jobs_topic.wait_until_all_handled()

    assert [(d.attempt, d.idempotency_key) for d in receiver.of(job_id)] == [(1, job_id)]
    assert (job(job_id).status, job(job_id).attempts) == ("succeeded", 1)


def test_a_message_of_an_attempt_that_already_ran_is_dropped(
    make_user, start_worker, receiver, jobs_topic
):
    user = make_user()
    job_id = queued_job(user.pk, receiver.url)
    jobs_topic.publish((job_id, message(job_id, user.pk, attempt=1)))
    start_worker("executor", "executor-a")
    wait_until(lambda: job(job_id).status == "succeeded", timeout=HANDLED_TIMEOUT, what="ran")
    finished_at = job(job_id).finished_at

    jobs_topic.publish((job_id, message(job_id, user.pk, attempt=1)))
    jobs_topic.wait_until_all_handled()

    assert len(receiver.of(job_id)) == 1
    ran = job(job_id)
    assert (ran.status, ran.attempts, ran.finished_at) == ("succeeded", 1, finished_at)


def test_a_stale_attempt_does_not_run_in_place_of_the_current_one(
    make_user, start_worker, receiver, jobs_topic
):
    """Attempt 1's message turns up again while the job waits for its attempt 2."""
    user = make_user()
    job_id = queued_job(user.pk, receiver.url, attempts=1)
    jobs_topic.publish((job_id, message(job_id, user.pk, attempt=1)))
    start_worker("executor", "executor-a")
    jobs_topic.wait_until_all_handled()
    assert receiver.of(job_id) == []
    assert (job(job_id).status, job(job_id).attempts) == ("queued", 1)

    jobs_topic.publish((job_id, message(job_id, user.pk, attempt=2)))
    wait_until(lambda: job(job_id).status == "succeeded", timeout=HANDLED_TIMEOUT, what="ran")

    assert [(d.attempt, d.idempotency_key) for d in receiver.of(job_id)] == [(2, job_id)]
    assert job(job_id).attempts == 2


def test_a_job_cancelled_after_publication_never_runs(
    make_user, start_worker, receiver, jobs_topic
):
    user = make_user()
    job_id = queued_job(user.pk, receiver.url)
    jobs_topic.publish((job_id, message(job_id, user.pk, attempt=1)))
    job_cancel(user_id=user.pk, job_id=job_id)

    start_worker("executor", "executor-a")
    jobs_topic.wait_until_all_handled()

    assert receiver.of(job_id) == []
    cancelled = job(job_id)
    assert (cancelled.status, cancelled.attempts, cancelled.started_at) == ("cancelled", 0, None)


def test_garbage_on_the_jobs_topic_does_not_stop_the_valid_job_behind_it(
    make_user, start_worker, receiver, jobs_topic
):
    user = make_user()
    job_id = queued_job(user.pk, receiver.url)
    valid = json.loads(message(job_id, user.pk, attempt=1))
    garbage = [
        b"not json at all",
        b"\xff\xfe\x00\x01",
        None,  # a tombstone: no value
        b"[]",
        json.dumps({**valid, "v": 2}).encode(),
        json.dumps({**valid, "attempt": "1"}).encode(),
        json.dumps({**valid, "due_at": "yesterday"}).encode(),
        message(job_id, user.pk, attempt=1, shard_id=99),
        message(job_id, user.pk, attempt=1, shard_id=-1),
        # Well-formed, but values PostgreSQL cannot take: these must not poison the claim.
        json.dumps({**valid, "job_id": "nul\u0000byte"}).encode(),
        json.dumps({**valid, "attempt": 2**31}).encode(),
        json.dumps({**valid, "job_id": "x" * 10_000}).encode(),
    ]
    # One key: every record lands in the valid job's partition, in front of it.
    jobs_topic.publish(*[(job_id, value) for value in garbage])
    jobs_topic.publish((job_id, message(job_id, user.pk, attempt=1)))

    executor = start_worker("executor", "executor-a")
    jobs_topic.wait_until_all_handled()

    assert executor.alive()
    assert [(d.attempt, d.idempotency_key) for d in receiver.of(job_id)] == [(1, job_id)]
    assert job(job_id).status == "succeeded"
