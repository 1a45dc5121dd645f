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

import pytest

from tests.e2e.test_fairness_end_to_end import (
    light_job_runs_while_webhooks_are_held,
    start_workers,
)

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
