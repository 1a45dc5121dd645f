"""Which of a round's jobs go to the express topic: those of users with few jobs in flight.

A Kafka partition is a FIFO queue. During another user's flood, every partition of the jobs
topic holds up to the schedulers' in-flight caps of the flood's messages (40,000 at the
defaults), and an executor reads them at the speed it can decode them: a job created due
now by a user with no backlog was read only after every message published before it, up
to a second and more at the start of a 100,000-job flood (tools/bench
light_user_due_now). Executors start what they hold in weighted fair order, so that wait
is one that fair order cannot shorten.

The express topic carries a user's jobs while it has fewer than ``EXPRESS_IN_FLIGHT`` in
flight on the shard (as the dispatcher counts them: ``ShardInFlight.counts``), and a
thread of each executor runs its due inline jobs as they arrive, charged to their users'
shares (executor_worker.express_runner); the executor's loop takes the rest before the
jobs topic. Jobs created due now are sent express at once, beside the rounds
(scheduler_worker.due_listener). A user past that many goes the usual way until its jobs finish,
so the topic holds at most ``EXPRESS_IN_FLIGHT`` jobs per user and shard: it never queues
behind a flood, and nobody passes anyone through it (a flood's first few jobs go express,
the rest do not, and executors charge express jobs to their users' shares).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from scheduler_worker.in_flight import LISTED_IN_FLIGHT
from scheduler_worker.shard_store import ClaimedJob

# Jobs of one user in flight on a shard below which its next ones go express: those the
# dispatcher lists by id, so it sees them finish between its counts.
EXPRESS_IN_FLIGHT = LISTED_IN_FLIGHT


def express_jobs(
    claimed: Iterable[ClaimedJob], *, in_flight: Mapping[int, int]
) -> list[ClaimedJob]:
    """Of the claimed jobs, each user's first ``EXPRESS_IN_FLIGHT`` less its jobs
    ``in_flight`` before the claim (users not in it: none): its highest priority, then its
    earliest due, then its lowest id (the order the user's jobs are claimed in)."""
    by_user: dict[int, list[ClaimedJob]] = defaultdict(list)
    for job in claimed:
        if job.user_id in in_flight and in_flight[job.user_id] < EXPRESS_IN_FLIGHT:
            by_user[job.user_id].append(job)
    chosen: list[ClaimedJob] = []
    for user, jobs in by_user.items():
        jobs.sort(key=_order)
        chosen += jobs[: EXPRESS_IN_FLIGHT - in_flight[user]]
    return chosen


def express_quotas(in_flight: Mapping[int, int], *, room: float) -> dict[int, int]:
    """For a claim of express jobs alone (scheduler_worker.due_listener): how many more of
    each user's jobs may go express, given its jobs ``in_flight``, within ``room`` (the
    shard's in-flight limit leaves), in the order given; users with none to spare are left
    out. At the limit, one job for each user with none in flight, as a round gives them
    (``ShardRounds._claim_for_idle_users``): the limit is passed by at most one job
    per such user."""
    if room <= 0:
        return {user: 1 for user, count in in_flight.items() if count <= 0}
    quotas: dict[int, int] = {}
    for user, count in in_flight.items():
        quota = min(EXPRESS_IN_FLIGHT - count, room)
        if quota > 0:
            quotas[user] = int(quota)
            room -= quota
    return quotas


def _order(job: ClaimedJob) -> tuple:
    return (-job.priority, job.due_at, job.job_id)
