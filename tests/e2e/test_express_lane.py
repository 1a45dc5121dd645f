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

from datetime import UTC, datetime

import pytest
from django.db import connections

from jobsvc.sharding.shards import shard_alias, shard_ids
from tests.e2e.test_fairness_end_to_end import (
    API_ENV,
    alive_or_fail,
    light_job_runs_while_webhooks_are_held,
    logged_in,
    schedulers_hold_every_shard,
    start_workers,
)
from tests.served_api import serving_api
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

EXECUTORS = 2  # start_workers' two
HANDLER_THREADS = 4  # per executor
READ_AHEAD = 20  # messages an executor holds before it stops reading
FLOOD = 400  # held webhooks: far more than the executors' threads and read-ahead take in


def test_a_users_job_due_now_starts_while_the_jobs_topic_is_not_read_past_a_flood(
    make_user, start_worker, receiver
):
    env = {
        "JOBSVC_EXECUTOR_CONCURRENCY": str(HANDLER_THREADS),
        "JOBSVC_EXECUTOR_READ_AHEAD": str(READ_AHEAD),
    }
    workers = start_workers(start_worker, env=env)
    light_job_runs_while_webhooks_are_held(
        workers,
        receiver,
        heavy=make_user().pk,
        light=make_user().pk,
        flood=FLOOD,
        held=EXECUTORS * HANDLER_THREADS,  # every handler thread
    )


def test_a_job_created_due_now_runs_without_waiting_for_the_schedulers_next_round(
    make_user, start_worker
):
    """Schedulers that look at their shards only once a minute: the API's notification
    (jobsvc.jobs.due_now) has the shard's owner send a job created due now at once."""
    env = {"JOBSVC_SCHEDULER_POLL_INTERVAL_SECONDS": str(NEXT_ROUND)}
    workers = start_workers(start_worker, env=env)
    wait_until(schedulers_hold_every_shard(workers), timeout=60, what="every shard is owned")
    wait_until(every_shard_had_a_round(workers), timeout=30, what="every shard had its first round")
    with serving_api(env=API_ENV) as api:
        client = logged_in(api, make_user().pk)
        job = client.create_job(message="now", execute_at=datetime.now(UTC))

        def ran() -> bool:
            alive_or_fail(workers)
            return client.get_job(job.id).status == "succeeded"

        wait_until(ran, timeout=NEXT_ROUND / 3, what="the job created due now ran")


NEXT_ROUND = 60.0  # seconds: JOBSVC_SCHEDULER_POLL_INTERVAL_SECONDS above


def every_shard_had_a_round(workers):
    def had() -> bool:
        alive_or_fail(workers)
        for shard_id in shard_ids():
            with connections[shard_alias(shard_id)].cursor() as cursor:
                cursor.execute("SELECT count(*) FROM jobs_shard_lease WHERE last_round_at IS NULL")
                if cursor.fetchone()[0]:
                    return False
        return True

    return had
