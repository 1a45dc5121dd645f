"""The express topic: a job of a user with nothing in flight does not queue behind another
user's messages in the jobs topic (scheduler_worker.express_lane).

Jobs go in through the public API; two schedulers and two executors run them. To make the
jobs topic's queue something no job can get past by speed, another user's webhooks are
held unanswered by the receiver: they take every handler thread, and the executors, whose
read-ahead is then full of the flood's webhooks waiting for a thread, stop reading the
jobs topic. Hundreds of the flood's messages stay unread in every partition; a job
published behind them would wait until the receiver lets go.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime

import pytest

from jobsvc_client.models import JobSpec
from tests.e2e.test_fairness_end_to_end import (
    API_ENV,
    alive_or_fail,
    job_rows,
    logged_in,
    start_workers,
    wait_until_finished,
)
from tests.served_api import serving_api
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

EXECUTORS = 2  # start_workers' two
HANDLER_THREADS = 4  # per executor
READ_AHEAD = 20  # messages an executor holds before it stops reading
FLOOD = 400  # held webhooks: far more than the executors' threads and read-ahead take in
TAKEN_IN_TIMEOUT = 60.0  # seconds for the schedulers to take the shards and the flood to run
LIGHT_TIMEOUT = 20.0  # seconds for the light job, before the held webhooks time out (30 s)


def test_a_users_job_due_now_starts_while_the_jobs_topic_is_not_read_past_a_flood(
    make_user, start_worker, receiver
):
    heavy, light = make_user().pk, make_user().pk
    receiver.hold()
    env = {
        "JOBSVC_EXECUTOR_CONCURRENCY": str(HANDLER_THREADS),
        "JOBSVC_EXECUTOR_READ_AHEAD": str(READ_AHEAD),
    }
    workers = start_workers(start_worker, env=env)
    webhook = {"handler": "http", "handler_params": {"url": receiver.url}}
    threads = EXECUTORS * HANDLER_THREADS
    with serving_api(env=API_ENV) as api:
        heavy_client = logged_in(api, heavy)
        flood = heavy_client.create_jobs(
            [JobSpec(message="held", execute_at=datetime.now(UTC), **webhook)] * FLOOD
        )

        def every_thread_held() -> bool:
            alive_or_fail(workers)
            return receiver.held() >= threads

        wait_until(every_thread_held, timeout=TAKEN_IN_TIMEOUT, what="every thread is held")
        light_client = logged_in(api, light)
        job = light_client.create_job(message="light", execute_at=datetime.now(UTC))

        def light_job_done() -> bool:
            alive_or_fail(workers)
            return light_client.get_job(job.id).status == "succeeded"

        wait_until(light_job_done, timeout=LIGHT_TIMEOUT, what="the light user's job ran")
        assert receiver.held() == threads, "the flood's webhooks did not stay held"
        assert not receiver.deliveries(), "a flood job finished: the executors read on"

        receiver.release()  # nothing is lost: every held and unread flood job runs
        wait_until_finished([heavy], workers, due=time.time())
    assert Counter(row.status for row in job_rows([heavy])) == {"succeeded": FLOOD}
    assert set(receiver.count_by_job()) == {flood_job.id for flood_job in flood}
