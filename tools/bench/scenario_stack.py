"""What a bench scenario runs on: the shard databases, the scenario's users and topics,
and the scheduler and executor processes.

Backlogs are written with COPY, straight into the shards; every scenario starts and ends
with empty job tables (``clean_slate``) and gets its own topics and ZooKeeper root
(``scenario_env``), so workers of one never see another's.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

from django.conf import settings
from django.db import connections
from django.utils import timezone

from jobsvc.accounts.models import User
from jobsvc.messaging.topics import ensure_topics, jobs_topics
from jobsvc.sharding.ids import new_job_id
from jobsvc.sharding.shards import shard_alias, shard_ids
from tools.bench.processes import WorkerProcess

PEAK_RATE = 1389  # jobs due per second at the design peak (5 million a hour)
LOAD_CHUNK = 20_000  # rows per COPY write
POLL_SECONDS = 1.0  # between checks of the shard databases while workers run (light)
WORKER_START_TIMEOUT = 60.0  # seconds until the schedulers hold every shard's lease

_COPY_JOBS = (
    "COPY jobs (id, user_id, message, execute_at, due_at, status, attempts, max_attempts, "
    "timeout_seconds, handler, handler_params, shard_id, last_error, attempt_errors, "
    "created_at, updated_at) FROM STDIN"
)


# --- the shard databases --------------------------------------------------------------


def load_jobs(shard_id: int, jobs: Iterable[tuple[int, datetime]]) -> int:
    """COPY scheduled jobs (user id, due time) into one shard; return how many."""
    now = timezone.now().isoformat()
    tail = (
        f"\tscheduled\t0\t{settings.JOB_DEFAULT_MAX_ATTEMPTS}\t"
        f"{settings.JOB_DEFAULT_TIMEOUT_SECONDS}\tdefault\t{{}}\t{shard_id}\t\t[]\t{now}\t{now}\n"
    )
    count = 0
    lines: list[str] = []
    with connections[shard_alias(shard_id)].cursor() as cursor, cursor.copy(_COPY_JOBS) as copy:
        for user_id, due in jobs:
            due_text = due.isoformat()
            job_id = new_job_id(shard_id=shard_id)
            lines.append(f"{job_id}\t{user_id}\tbench\t{due_text}\t{due_text}{tail}")
            if len(lines) == LOAD_CHUNK:
                copy.write("".join(lines))
                count += len(lines)
                lines.clear()
        copy.write("".join(lines))
    return count + len(lines)


def load_spread(users: Sequence[int], per_user: int, due: Callable[[int], datetime]) -> int:
    """Each user's ``per_user`` jobs, spread evenly over the shards; job ``i`` of all (shard
    ``i % shards``, the users taking turns on each shard) is due at ``due(i)``."""
    shards = len(shard_ids())
    total = len(users) * per_user
    for shard_id in shard_ids():
        load_jobs(
            shard_id,
            ((users[(i // shards) % len(users)], due(i)) for i in range(shard_id, total, shards)),
        )
    analyze()
    return total


def truncate_jobs() -> None:
    for shard_id in shard_ids():
        with connections[shard_alias(shard_id)].cursor() as cursor:
            cursor.execute("TRUNCATE jobs")


def analyze() -> None:
    """VACUUM ANALYZE: fresh statistics and visibility map, as autovacuum would leave them."""
    for shard_id in shard_ids():
        with connections[shard_alias(shard_id)].cursor() as cursor:
            cursor.execute("VACUUM ANALYZE jobs")


def on_every_shard(sql: str, params: dict | None = None) -> list[tuple]:
    rows: list[tuple] = []
    for shard_id in shard_ids():
        with connections[shard_alias(shard_id)].cursor() as cursor:
            cursor.execute(sql, params)
            rows += cursor.fetchall()
    return rows


def database_now() -> datetime:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def any_job(where: str) -> bool:
    """Whether any shard has a job matching ``where`` (cheap: stops at the first)."""
    return any(
        found for (found,) in on_every_shard(f"SELECT EXISTS (SELECT 1 FROM jobs WHERE {where})")
    )


def wait_for(predicate: Callable[[], bool], *, timeout: float, what: str, workers=()) -> float:
    """Poll until ``predicate``; fail if it takes longer than ``timeout`` or a worker died."""
    started = time.monotonic()
    while not predicate():
        dead = [worker.name for worker in workers if not worker.alive()]
        if dead:
            raise RuntimeError(f"{', '.join(dead)} exited while waiting until {what}")
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"not within {timeout:.0f} s: {what}")
        time.sleep(POLL_SECONDS)  # polling the databases, bounded by the timeout
    return time.monotonic() - started


# --- worker processes -----------------------------------------------------------------


def scenario_env(context, name: str, **extra: str) -> dict[str, str]:
    """The stack's environment with this scenario's own topics and ZooKeeper root."""
    return isolated_env(context.env, name, **extra)


def isolated_env(base: dict[str, str], name: str, **extra: str) -> dict[str, str]:
    """``base`` with new topics, consumer group and ZooKeeper root named after ``name``."""
    suffix = f"{name}-{secrets.token_hex(3)}"
    jobs_topic, dead_letter_topic = f"bench-jobs-{suffix}", f"bench-dead-letter-{suffix}"
    ensure_topics(
        bootstrap=settings.KAFKA_BOOTSTRAP,
        topics=jobs_topics(
            jobs_topic=jobs_topic,
            dead_letter_topic=dead_letter_topic,
            partitions=settings.KAFKA_JOBS_PARTITIONS,
        ),
    )
    return {
        **base,
        "JOBSVC_KAFKA_JOBS_TOPIC": jobs_topic,
        "JOBSVC_KAFKA_DEAD_LETTER_TOPIC": dead_letter_topic,
        "JOBSVC_EXECUTOR_GROUP_ID": f"bench-executors-{suffix}",
        "JOBSVC_ZK_ROOT": f"/bench-{suffix}",
        "JOBSVC_LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


@contextmanager
def started_workers(
    context,
    env: dict[str, str],
    *,
    schedulers: int,
    executors: int,
    scheduler_args: Sequence[str] = (),
) -> Iterator[list[WorkerProcess]]:
    """Start the workers and wait until the schedulers hold every shard; stop them after."""
    started: list[WorkerProcess] = []
    try:
        for index in range(executors):
            started.append(worker_process(context, env, "executor", index))
        names = set()
        for index in range(schedulers):
            worker = worker_process(context, env, "scheduler", index, scheduler_args)
            names.add(worker.name)
            started.append(worker)
        wait_for(
            lambda: lease_owners() == names,
            timeout=WORKER_START_TIMEOUT,
            what="the schedulers hold every shard's lease",
            workers=started,
        )
        yield started
    finally:
        for worker in started:
            worker.stop()


def worker_process(context, env, kind: str, index: int, args: Sequence[str] = ()) -> WorkerProcess:
    return WorkerProcess(
        kind=kind,
        name=f"bench-{kind}-{index}-{secrets.token_hex(2)}",
        env=env,
        log_dir=context.out,
        args=tuple(args),
    )


def lease_owners() -> set[str]:
    owners = on_every_shard("SELECT owner FROM jobs_shard_lease")
    if len(owners) < len(shard_ids()):
        return set()
    return {owner for (owner,) in owners}


def make_users(weights: Sequence[float]) -> list[int]:
    return [
        User.objects.create(username=f"bench-{secrets.token_hex(4)}", job_weight=weight).pk
        for weight in weights
    ]


@contextmanager
def clean_slate(user_weights: Sequence[float] = ()) -> Iterator[list[int]]:
    """Empty job tables and fresh users for the scenario; both cleaned up afterwards."""
    truncate_jobs()
    users = make_users(user_weights)
    try:
        yield users
    finally:
        truncate_jobs()
        User.objects.filter(pk__in=users).delete()


def describe_setup(*, schedulers: int, executors: int, extra: str = "") -> str:
    shards = len(shard_ids())
    servers = len({settings.DATABASES[shard_alias(s)]["PORT"] for s in shard_ids()})
    text = (
        f"{shards} shards on {servers} PostgreSQL servers; {schedulers} scheduler and "
        f"{executors} executor processes; {os.cpu_count()} cores shared with PostgreSQL, "
        "ZooKeeper, Kafka and the bench itself"
    )
    return f"{text}; {extra}" if extra else text
