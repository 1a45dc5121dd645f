"""Weighted fair share end to end: real scheduler and executor processes draining backlogs.

Backlogs are bulk-loaded straight into the shards, spread evenly over them, so every shard
sees the same users; shares are measured from the jobs' ``dispatched_at``, the database
time of the claim that took them. Each user may have its weighted share of a shard's
in-flight limit in flight, and the executor starts what it holds in weighted fair order,
so what is dispatched again follows the weights too.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

import pytest
from django.conf import settings
from django.db import connections
from django.db.models import Q
from django.utils import timezone

from jobsvc.accounts.models import User
from jobsvc.jobs import store
from jobsvc.jobs.models import Job
from jobsvc.jobs.specs import JobSpec
from jobsvc.sharding.ids import new_job_id
from jobsvc.sharding.shards import shard_alias, shard_ids
from tests.e2e.jobs import all_jobs, create, spec
from tests.e2e.servers import postgres_log_marks, postgres_logs_since
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

# A small in-flight limit: dispatch is the executor's pace, so the users compete for every
# slot, as a backlog does in production.
CONTENDED = ("--max-in-flight", "40")
# A scheduler alone, publishing all it may (no executor finishes what it sends).
UNLIMITED = ("--max-in-flight", "100000000", "--in-flight-seconds", "0")
SHARE_TOLERANCE = 0.05  # absolute, on a share of dispatches (the "within 5%")


def backlog(user_id: int, count: int, *, overdue: float = 60.0) -> None:
    """``count`` jobs of the user, due ``overdue`` seconds ago, spread evenly over the shards."""
    now = timezone.now()
    job = JobSpec(
        message="backlog",
        execute_at=now - timedelta(seconds=overdue),
        max_attempts=settings.JOB_DEFAULT_MAX_ATTEMPTS,
        timeout_seconds=settings.JOB_DEFAULT_TIMEOUT_SECONDS,
    )
    shards = list(shard_ids())
    for index, shard_id in enumerate(shards):
        rows = [
            store.new_job_row(
                job_id=new_job_id(shard_id=shard_id, at=now),
                user_id=user_id,
                spec=job,
                shard_id=shard_id,
                now=now,
            )
            for _ in range(count // len(shards) + (index < count % len(shards)))
        ]
        store.insert_jobs(shard_alias(shard_id), rows)


def dispatches(user_ids, *, since: datetime | None = None):
    """(dispatched_at, user_id, shard_id) of every dispatched job of these users, in order."""
    found = []
    for shard_id in shard_ids():
        jobs = Job.objects.using(shard_alias(shard_id)).filter(
            user_id__in=user_ids, dispatched_at__isnull=False
        )
        if since is not None:
            jobs = jobs.filter(dispatched_at__gte=since)
        found += jobs.values_list("dispatched_at", "user_id", "shard_id")
    return sorted(found)


def shares(found) -> dict[int, float]:
    counts = Counter(user_id for _, user_id, _ in found)
    total = sum(counts.values())
    return {user_id: n / total for user_id, n in counts.items()}


def scheduled(user_id: int) -> int:
    return sum(
        Job.objects.using(shard_alias(s)).filter(user_id=user_id, status="scheduled").count()
        for s in shard_ids()
    )


def backlogged_everywhere(user_ids) -> bool:
    """Every user still has jobs waiting on every shard (so it competed for every slot)."""
    return all(
        Job.objects.using(shard_alias(s)).filter(user_id=user_id, status="scheduled").exists()
        for user_id in user_ids
        for s in shard_ids()
    )


def all_jobs_count(*conditions: Q, **filters) -> int:
    return sum(
        Job.objects.using(shard_alias(s)).filter(*conditions, **filters).count()
        for s in shard_ids()
    )


def database_now() -> datetime:
    with connections[shard_alias(0)].cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def test_backlogged_users_with_weights_1_2_4_get_1_2_4_sevenths_of_dispatch(
    make_user, start_worker
):
    users = {make_user(job_weight=weight).pk: weight for weight in (1.0, 2.0, 4.0)}
    for user_id in users:
        backlog(user_id, 2000)
    start_worker("scheduler", "scheduler-a", args=CONTENDED)
    start_worker("executor", "executor-a")

    wait_until(
        lambda: min(scheduled(user_id) for user_id in users) == 0,
        timeout=90,
        what="one user's backlog is drained",
    )

    found = dispatches(users)
    # Measure while all three users still had due jobs on every shard: up to the first
    # round that drained a user on some shard.
    last_round: dict[tuple[int, int], datetime] = {}
    for at, user_id, shard_id in found:
        last_round[user_id, shard_id] = at
    drained_at = min(last_round.values())
    contended = [dispatch for dispatch in found if dispatch[0] < drained_at]
    assert len(contended) >= 1000, f"only {len(contended)} dispatches under contention"
    total_weight = sum(users.values())
    measured = shares(contended)
    for user_id, weight in users.items():
        assert measured[user_id] == pytest.approx(weight / total_weight, abs=SHARE_TOLERANCE), (
            f"weight {weight}: share {measured[user_id]:.3f} of {len(contended)} dispatches"
        )


def test_a_light_users_job_goes_in_the_next_round_behind_100000_overdue_jobs(
    make_user, start_worker
):
    # No in-flight limit to speak of: the heavy backlog leaves as fast as the scheduler
    # dispatches it, so the light jobs compete with full rounds every time, and their wait
    # is the scheduler's alone (the test after this one has the limit full).
    heavy, *light = make_user(), make_user(), make_user(), make_user()
    database_logs = postgres_log_marks()
    backlog(heavy.pk, 300_000)  # dispatched at tens of thousands a second from the start
    scheduler = start_worker("scheduler", "scheduler-a", args=UNLIMITED)
    wait_until(
        lambda: all(
            Job.objects.using(shard_alias(s)).filter(dispatched_at__isnull=False).exists()
            for s in shard_ids()
        ),
        timeout=60,
        what="the heavy user's backlog is being dispatched from every shard",
    )

    # A few samples at once, each from a user new to the scheduler. How many heavy jobs a
    # light job was behind is read from the claims' database times afterwards, not from a
    # count taken before it, which a fast scheduler outruns.
    # Each is due from the moment its create returns (committed): the wait is the
    # scheduler's, not the creates' on a machine busy with the backlog.
    now, committed = timezone.now(), {}
    for user in light:
        (job_id,) = create(user.pk, [spec(due=now)])
        committed[job_id] = timezone.now()
    wait_until(
        lambda: all(job.dispatched_at is not None for job in all_jobs(pk__in=list(committed))),
        timeout=30,
        what="the light users' jobs are dispatched",
    )
    for job in all_jobs(pk__in=list(committed)):
        behind = all_jobs_count(
            Q(dispatched_at__isnull=True) | Q(dispatched_at__gt=job.dispatched_at),
            user_id=heavy.pk,
        )
        assert behind >= 100_000, f"only {behind} heavy jobs were still waiting"
        # Claims on its shard after its create returned and before the one that took it:
        # those of the round under way then (rooms, then spare room), at most. Counted, not
        # timed: how long a round takes is the machine's, which round takes it is the
        # scheduler's (what a claim costs is tests/integration/test_shard_store.py's).
        passed_over = (
            Job.objects.using(shard_alias(job.shard_id))
            .filter(dispatched_at__gte=committed[job.id], dispatched_at__lt=job.dispatched_at)
            .values("dispatched_at")
            .distinct()
            .count()
        )
        waited = (job.dispatched_at - committed[job.id]).total_seconds()
        assert passed_over <= 2, (
            f"{job.id} dispatched {waited:.3f} s after its create returned, after "
            f"{passed_over} claims on its shard; the scheduler's log ends:\n"
            f"{scheduler.log()[-4000:]}\n"
            f"PostgreSQL logged:\n{postgres_logs_since(database_logs)[-4000:]}"
        )


def test_with_the_in_flight_cap_full_a_light_users_job_takes_the_next_free_slot(
    make_user, start_worker
):
    heavy, *light = make_user(), make_user(), make_user(), make_user()
    backlog(heavy.pk, 200_000)  # the executor drains over 10,000 a second
    start_worker("scheduler", "scheduler-a")  # the default in-flight cap
    start_worker("executor", "executor-a")
    # Steady state: the in-flight window is full and the executor drains it. (Until the
    # executor has joined its consumer group, a few seconds after it starts, nothing
    # finishes, no slot frees up and nothing at all is dispatched.)
    wait_until(
        lambda: all_jobs_count(status="succeeded") >= 2000,
        timeout=60,
        what="the executor is working through the heavy user's jobs",
    )

    passed_over = {}
    for user in light:
        assert scheduled(heavy.pk) > 50_000, "no queue left to jump"
        # Due a moment after it is created, so it is in the database before it is due.
        job = dispatched_job_of(user, due_in=0.5)
        # Claims on its shard after it was due and before the one that took it: a round
        # that listed the users with due jobs just before it was due, at most.
        passed_over[job.id] = (
            Job.objects.using(shard_alias(job.shard_id))
            .filter(dispatched_at__gte=job.due_at, dispatched_at__lt=job.dispatched_at)
            .values("dispatched_at")
            .distinct()
            .count()
        )

    assert max(passed_over.values()) <= 1, f"claims of heavy jobs ahead of it: {passed_over}"


def dispatched_job_of(user, *, due_in: float = 0.0) -> Job:
    """Create one job of the user, due in ``due_in`` seconds, and wait for its dispatch."""
    [job_id] = create(user.pk, [spec(due=timezone.now() + timedelta(seconds=due_in))])
    wait_until(
        lambda: all_jobs(pk=job_id)[0].dispatched_at is not None,
        timeout=30,
        what="the light user's job is dispatched",
    )
    [job] = all_jobs(pk=job_id)
    return job


def test_a_weight_change_moves_the_shares_within_seconds(make_user, start_worker):
    steady, raised = make_user(job_weight=1.0), make_user(job_weight=1.0)
    users = [steady.pk, raised.pk]
    for user_id in users:
        backlog(user_id, 4000)
    start_worker("scheduler", "scheduler-a", args=("--max-in-flight", "20"))
    start_worker("executor", "executor-a")
    wait_until(lambda: len(dispatches(users)) >= 600, timeout=60, what="dispatch under way")

    before = shares(dispatches(users))
    User.objects.filter(pk=raised.pk).update(job_weight=4.0)
    changed_at = database_now()
    # The scheduler re-reads weights every JOBSVC_SCHEDULER_WEIGHT_REFRESH_SECONDS (2 s).
    settle = timedelta(seconds=2.5)
    wait_until(
        lambda: len(dispatches(users, since=changed_at + settle)) >= 500,
        timeout=60,
        what="dispatches after the change took effect",
    )

    after_window = dispatches(users, since=changed_at + settle)
    assert backlogged_everywhere(users), "a backlog ran dry somewhere: no contention"
    after = shares(after_window)
    assert before[raised.pk] == pytest.approx(0.5, abs=SHARE_TOLERANCE)
    assert after[raised.pk] == pytest.approx(0.8, abs=SHARE_TOLERANCE), (
        f"share after the change: {after[raised.pk]:.3f} of {len(after_window)} dispatches"
    )
