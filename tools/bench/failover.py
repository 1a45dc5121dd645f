"""Failover: SIGKILL a scheduler and an executor while jobs fall due at a steady rate.

Two schedulers and two executors run with fast failure timings (ZooKeeper session timeout 4 s,
sweep every 0.5 s, queued lease 3 s, executor lease grace 1 s, as the end-to-end tests
use). Jobs are due at ``RATE`` per second for ``FULL_SECONDS`` (quick: ``QUICK_SECONDS``),
COPY-loaded into the shards just before the first is due. Each job uses the ``http``
handler against a receiver in this process that counts deliveries per
``(job_id, attempt)``, so executions are observed, not inferred. ``KILL_AFTER`` seconds
(quick: ``QUICK_KILL_AFTER``) after the first job is due, one scheduler and one executor
get SIGKILL at the same moment.

What is measured:

- *throughput recovery*: jobs finished per second (by ``finished_at``) against the
  pre-kill level (the median over the whole seconds before the kill, after a warm-up);
  recovered = the first second from which ``RECOVERED_FOR`` consecutive seconds are at
  least ``RECOVERED_FRACTION`` of that level;
- *on time again*: from which due time on every job started within ``LATE_SECONDS``;
- *shard takeover*: until the survivor holds the dead scheduler's shard leases;
- *jobs lost*: jobs that did not end ``succeeded`` (must be 0);
- *duplicate executions*: deliveries of the same ``(job, attempt)`` more than once,
  observed at the receiver (0 by construction: an attempt runs only after its executor
  claimed it with a conditional update). Separately, jobs with ``attempts > 1``: an
  attempt that was running in the killed executor is over when its lease expires
  (timeout + grace) and runs again as attempt 2, under the job's one Idempotency-Key
  (its id), so a receiver can drop it if attempt 1 had its effect. That is the contract
  (at-least-once per job, exactly once per attempt), not a duplicate; the job's
  ``attempt_errors`` say why.

    make bench ARGS="--quick --only failover"
"""

from __future__ import annotations

import math
import os
import statistics
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connections

from jobsvc.accounts.models import User
from jobsvc.jobs import store
from jobsvc.jobs.specs import JobSpec
from jobsvc.sharding.ids import new_job_id
from jobsvc.sharding.shards import shard_alias, shard_ids
from scheduler_worker.queries import LOST_ATTEMPT_ERROR
from tools.bench.processes import WorkerProcess
from tools.bench.scenario_stack import lease_owners, scenario_env, started_workers
from tools.fast_timings import FAST_FAILURE_TIMINGS
from tools.webhook_receiver import Receiver

RATE = 300  # jobs due per second
FULL_SECONDS = 40  # seconds over which jobs fall due
# Quick mode still needs room after the kill: the dead executor's partitions stall for
# the consumer session (6 s) plus a rebalance (about 3 s) before throughput can recover.
QUICK_SECONDS = 25
KILL_AFTER = 12.0  # seconds after the first job is due
QUICK_KILL_AFTER = 8.0
LEAD_SECONDS = 2.0  # from loading the jobs to the first one due
WARM_UP_SECONDS = 2  # whole seconds at the start left out of the pre-kill level
USERS = 4
JOB_TIMEOUT_SECONDS = 2.0  # per attempt: a killed executor's running lease is this + grace
RECOVERED_FRACTION = 0.9  # of the pre-kill finished/s that counts as recovered
RECOVERED_FOR = 3  # consecutive seconds at that level
LATE_SECONDS = 1.0  # a job started later than this after execute_at is late
POLL_SECONDS = 0.25  # between checks of the shards while the run lasts
DRAIN_TIMEOUT = 90.0  # seconds after the last due time for every job to finish
COPY_CHUNK = 10_000
QUANTILES = 1000  # the lateness distribution is kept as this many + 1 quantiles

# The end-to-end tests' fast failure timings (tools/fast_timings.py), and a queued lease
# of 3 s, so recovery is measured in seconds rather than minutes.
FAST_TIMINGS = {**FAST_FAILURE_TIMINGS, "JOBSVC_SCHEDULER_QUEUED_TIMEOUT_SECONDS": "3"}


@dataclass(frozen=True)
class Timeline:
    """Wall-clock (Unix) seconds: ``start`` is when the first job is due."""

    start: float
    seconds: int  # jobs fall due over [start, start + seconds)
    kill_offset: float  # seconds after start


def run_failover(context) -> dict:
    seconds = QUICK_SECONDS if context.quick else FULL_SECONDS
    suffix = uuid.uuid4().hex[:6]
    env = scenario_env(context, "failover", **FAST_TIMINGS)
    users = [User.objects.create(username=f"bench-failover-{suffix}-{n}").pk for n in range(USERS)]
    try:
        with (
            Receiver() as receiver,
            started_workers(context, env, schedulers=2, executors=2) as workers,
        ):
            schedulers = [worker for worker in workers if worker.kind == "scheduler"]
            executors = [worker for worker in workers if worker.kind == "executor"]
            timeline = Timeline(
                start=time.time() + LEAD_SECONDS,
                seconds=seconds,
                kill_offset=QUICK_KILL_AFTER if context.quick else KILL_AFTER,
            )
            jobs = _load(users, timeline, receiver.url)
            killed, takeover = _kill_and_wait(timeline, users, schedulers, executors)
            deliveries = Counter((d.job_id, d.attempt) for d in receiver.deliveries())
        rows = _jobs(users)
    finally:
        _clean(users)
    return _result(
        rows=rows,
        jobs=jobs,
        deliveries=deliveries,
        timeline=timeline,
        killed=killed,
        takeover=takeover,
    )


# --- the run ----------------------------------------------------------------------------


def _load(users: list[int], timeline: Timeline, url: str) -> int:
    """COPY the jobs: job ``i`` due at ``start + i / RATE``, round-robin over the shards
    and the users."""
    now = datetime.now(UTC)
    start = datetime.fromtimestamp(timeline.start, UTC)
    shards = list(shard_ids())
    total = RATE * timeline.seconds
    for shard_id in shards:
        rows = [
            store.new_job_row(
                job_id=new_job_id(shard_id=shard_id, at=now),
                user_id=users[i % len(users)],
                spec=JobSpec(
                    message="bench failover",
                    execute_at=start + timedelta(seconds=i / RATE),
                    max_attempts=settings.JOB_DEFAULT_MAX_ATTEMPTS,
                    timeout_seconds=JOB_TIMEOUT_SECONDS,
                    handler="http",
                    handler_params={"url": url},
                ),
                shard_id=shard_id,
                now=now,
            )
            for i in range(shard_id, total, len(shards))
        ]
        for chunk in range(0, len(rows), COPY_CHUNK):
            store.insert_jobs(shard_alias(shard_id), rows[chunk : chunk + COPY_CHUNK])
    if time.time() > timeline.start:
        raise RuntimeError("loading the jobs took longer than the lead time; raise LEAD_SECONDS")
    return total


def _kill_and_wait(
    timeline: Timeline,
    users: list[int],
    schedulers: list[WorkerProcess],
    executors: list[WorkerProcess],
) -> tuple[list[str], float | None]:
    """SIGKILL a scheduler and an executor at the kill time, then wait until every job is
    terminal. Returns who was killed and when (seconds after the kill) the surviving
    scheduler held every shard's lease."""
    time.sleep(max(0.0, timeline.start + timeline.kill_offset - time.time()))
    victims = [schedulers[0], executors[0]]
    for victim in victims:
        victim.kill()
    killed_at = time.time()
    survivors = [schedulers[1], executors[1]]
    takeover: float | None = None
    deadline = timeline.start + timeline.seconds + DRAIN_TIMEOUT
    while True:
        if takeover is None and lease_owners() == {schedulers[1].name}:
            takeover = time.time() - killed_at
        if takeover is not None and _unfinished(users) == 0:
            break
        dead = [worker.name for worker in survivors if not worker.alive()]
        if dead:
            raise RuntimeError(f"{', '.join(dead)} exited during the failover run")
        if time.time() > deadline:
            raise RuntimeError(
                f"{_unfinished(users)} jobs unfinished {DRAIN_TIMEOUT:.0f} s after the last "
                "due time"
            )
        time.sleep(POLL_SECONDS)  # polling the shards, bounded by the deadline
    return [f"{victim.kind} {victim.name}" for victim in victims], takeover


# --- the shards -------------------------------------------------------------------------


def _unfinished(users: list[int]) -> int:
    total = 0
    for shard_id in shard_ids():
        with connections[shard_alias(shard_id)].cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM jobs WHERE status IN ('scheduled', 'queued', 'running') "
                "AND user_id = ANY(%s)",
                [users],
            )
            total += cursor.fetchone()[0]
    return total


@dataclass(frozen=True)
class JobOutcome:
    id: str
    status: str
    attempts: int
    execute_at: float  # Unix seconds
    started_at: float | None
    finished_at: float | None
    lost_attempts: int  # attempts ended by the sweeper because their executor died


def _jobs(users: list[int]) -> list[JobOutcome]:
    outcomes = []
    for shard_id in shard_ids():
        with connections[shard_alias(shard_id)].cursor() as cursor:
            cursor.execute(
                "SELECT id, status, attempts, extract(epoch FROM execute_at)::float8, "
                "       extract(epoch FROM started_at)::float8, "
                "       extract(epoch FROM finished_at)::float8, "
                "       (SELECT count(*) FROM jsonb_array_elements(attempt_errors) AS e "
                "         WHERE e->>'error' = %s) "
                "  FROM jobs WHERE user_id = ANY(%s)",
                [LOST_ATTEMPT_ERROR, users],
            )
            outcomes += [JobOutcome(*row) for row in cursor.fetchall()]
    return outcomes


def _clean(users: list[int]) -> None:
    for shard_id in shard_ids():
        with connections[shard_alias(shard_id)].cursor() as cursor:
            cursor.execute("DELETE FROM jobs WHERE user_id = ANY(%s)", [users])
    User.objects.filter(pk__in=users).delete()


# --- the numbers ------------------------------------------------------------------------


def per_second(times: list[float], *, start: float, seconds: int) -> list[int]:
    """How many of ``times`` fall in each whole second ``[start + s, start + s + 1)``."""
    counts = [0] * seconds
    for moment in times:
        index = int(moment - start) if moment >= start else -1
        if 0 <= index < seconds:
            counts[index] += 1
    return counts


def recovery_second(
    counts: list[int], *, level: float, after: int, fraction: float, for_seconds: int
) -> int | None:
    """The first second ``>= after`` that starts ``for_seconds`` seconds in a row of at
    least ``fraction * level``; None if there is none."""
    threshold = fraction * level
    for second in range(after, len(counts) - for_seconds + 1):
        if all(count >= threshold for count in counts[second : second + for_seconds]):
            return second
    return None


def quantiles(values: list[float], n: int = QUANTILES) -> list[float]:
    """``n + 1`` evenly spaced order statistics (min, ..., max) of the values."""
    if not values:
        return []
    ordered = sorted(values)
    return [ordered[round(k * (len(ordered) - 1) / n)] for k in range(n + 1)]


def _distribution_ms(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50_ms": None, "p99_ms": None, "p99_9_ms": None, "max_ms": None}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {"p50_ms": at(0.5), "p99_ms": at(0.99), "p99_9_ms": at(0.999), "max_ms": at(1.0)}


def _result(
    *,
    rows: list[JobOutcome],
    jobs: int,
    deliveries: Counter[tuple[str, int]],
    timeline: Timeline,
    killed: list[str],
    takeover: float | None,
) -> dict:
    start, seconds, kill = timeline.start, timeline.seconds, timeline.kill_offset
    statuses = Counter(row.status for row in rows)
    finish_times = [r.finished_at for r in rows if r.finished_at]
    # The series runs on past the due period until the last job finished (the catch-up);
    # recovery is looked for within the due period, where the pre-kill level applies.
    span = max(seconds, math.ceil(max(finish_times, default=start) - start))
    finished = per_second(finish_times, start=start, seconds=span)
    kill_second = int(kill)
    before = finished[WARM_UP_SECONDS:kill_second]
    level = statistics.median(before) if before else float(RATE)
    recovered = recovery_second(
        finished[:seconds],
        level=level,
        after=kill_second,
        fraction=RECOVERED_FRACTION,
        for_seconds=RECOVERED_FOR,
    )
    lateness = {row.id: row.started_at - row.execute_at for row in rows if row.started_at}
    due_before, due_after = [], []
    for row in rows:
        if row.id in lateness:
            due = row.execute_at - start
            (due_before if due < kill else due_after).append(lateness[row.id])
    late_due = [r.execute_at - start for r in rows if lateness.get(r.id, 0.0) > LATE_SECONDS]
    same_attempt_twice = sum(n - 1 for n in deliveries.values() if n > 1)
    delivered_jobs = Counter(job_id for job_id, _ in deliveries)
    succeeded_ids = {row.id for row in rows if row.status == "succeeded"}
    result = {
        "rate_per_second": RATE,
        "due_over_seconds": seconds,
        "jobs": jobs,
        "kill_at_seconds": kill,
        "killed": killed,
        "pre_kill_finished_per_second": level,
        "throughput_recovered_after_seconds": (
            None if recovered is None else max(0, recovered - kill_second)
        ),
        "lowest_finished_per_second_after_kill": min(finished[kill_second:seconds], default=None),
        "last_job_finished_after_seconds": round(max(finish_times, default=start) - start, 1),
        "shards_taken_over_after_seconds": None if takeover is None else round(takeover, 1),
        "on_time_again_after_seconds": round(max(late_due) - kill, 1) if late_due else 0.0,
        "jobs_lost": jobs - statuses.get("succeeded", 0),
        "statuses": dict(statuses),
        "jobs_with_more_than_one_attempt": sum(1 for row in rows if row.attempts > 1),
        "attempts_lost_with_the_executor": sum(row.lost_attempts for row in rows),
        "duplicate_executions_of_an_attempt": same_attempt_twice,
        "jobs_delivered_more_than_once": sum(1 for n in delivered_jobs.values() if n > 1),
        "succeeded_but_never_delivered": len(succeeded_ids - set(delivered_jobs)),
        "lateness_started_minus_due": {
            "before_kill": _distribution_ms(due_before),
            "after_kill": _distribution_ms(due_after),
        },
        "series": {
            "finished_per_second": finished,
            "started_late_ms_p99_by_due_second": _p99_by_second(rows, lateness, start, seconds),
        },
        "lateness_quantiles_ms": {
            "due before the kill": [round(1000 * v, 1) for v in quantiles(due_before)],
            "due after the kill": [round(1000 * v, 1) for v in quantiles(due_after)],
        },
    }
    result["setup"] = _setup(seconds)
    result["markdown"] = _markdown(result)
    return result


def _p99_by_second(rows, lateness, start: float, seconds: int) -> list[float | None]:
    by_second: list[list[float]] = [[] for _ in range(seconds)]
    for row in rows:
        index = int(row.execute_at - start)
        if row.id in lateness and 0 <= index < seconds:
            by_second[index].append(lateness[row.id])
    return [_distribution_ms(values)["p99_ms"] for values in by_second]


def _setup(seconds: int) -> str:
    servers = {urlsplit(url).netloc for url in settings.SHARD_DB_URLS}
    return (
        f"{len(shard_ids())} shards on {len(servers)} PostgreSQL server(s); 2 schedulers, "
        f"2 executors; {settings.KAFKA_JOBS_PARTITIONS}-partition jobs topic on Apache Kafka, "
        f"ZooKeeper; {os.cpu_count()} cores shared by all of it and the bench; "
        f"{RATE} jobs/s due for {seconds} s over {USERS} users, http handler to a local "
        f"receiver, job timeout {JOB_TIMEOUT_SECONDS:g} s; fast failure timings "
        f"(ZooKeeper session timeout {FAST_TIMINGS['JOBSVC_ZK_SESSION_TIMEOUT_SECONDS']} s, queued "
        f"lease {FAST_TIMINGS['JOBSVC_SCHEDULER_QUEUED_TIMEOUT_SECONDS']} s, sweep "
        f"{FAST_TIMINGS['JOBSVC_SCHEDULER_SWEEP_INTERVAL_SECONDS']} s, executor lease grace "
        f"{FAST_TIMINGS['JOBSVC_EXECUTOR_LEASE_SECONDS']} s; Kafka consumer session "
        "timeout 6 s)"
    )


def _markdown(r: dict) -> str:
    def seconds_text(value) -> str:
        return "not within the due period" if value is None else f"{value:g} s"

    before = r["lateness_started_minus_due"]["before_kill"]
    after = r["lateness_started_minus_due"]["after_kill"]
    lost = r["jobs_lost"]
    lines = [
        "| measure | value |",
        "|---|---:|",
        f"| jobs (due at {r['rate_per_second']}/s for {r['due_over_seconds']} s) | {r['jobs']:,} |",
        f"| killed at {r['kill_at_seconds']:g} s (SIGKILL) | {', '.join(r['killed'])} |",
        f"| finished/s before the kill (median) | {r['pre_kill_finished_per_second']:g} |",
        f"| lowest finished/s after the kill | {r['lowest_finished_per_second_after_kill']} |",
        f"| last job finished at (first due at 0 s) | {r['last_job_finished_after_seconds']:g} s |",
        f"| throughput recovered after | {seconds_text(r['throughput_recovered_after_seconds'])} |",
        f"| survivor holds every shard after | "
        f"{seconds_text(r['shards_taken_over_after_seconds'])} |",
        f"| jobs due from the kill + this on start within {LATE_SECONDS:g} s | "
        f"{r['on_time_again_after_seconds']:g} s |",
        f"| started - due, due before the kill: p50 / p99 / max ms | "
        f"{before['p50_ms']} / {before['p99_ms']} / {before['max_ms']} |",
        f"| started - due, due after the kill: p50 / p99 / max ms | "
        f"{after['p50_ms']} / {after['p99_ms']} / {after['max_ms']} |",
        f"| **jobs lost** (not succeeded; must be 0) | **{lost}** |",
        f"| duplicate executions of the same (job, attempt), observed | "
        f"{r['duplicate_executions_of_an_attempt']} |",
        f"| jobs with attempts > 1 | {r['jobs_with_more_than_one_attempt']} |",
        f"| attempts ended by the killed executor | {r['attempts_lost_with_the_executor']} |",
        f"| jobs delivered more than once (different attempts) | "
        f"{r['jobs_delivered_more_than_once']} |",
        "",
        f"Setup: {r['setup']}. Throughput recovered: the first second after the kill from "
        f"which {RECOVERED_FOR} seconds in a row finish at least "
        f"{RECOVERED_FRACTION:.0%} of the pre-kill median (seconds {WARM_UP_SECONDS} up to "
        "the kill). A job whose attempt was running in the killed executor runs again as "
        "attempt 2 once that attempt's lease (job timeout + grace) expires, under the same "
        "Idempotency-Key (the job id): that is the at-least-once-per-job contract, so it is "
        "counted "
        "under attempts > 1, not as a duplicate. Duplicates of the same attempt are "
        "counted at the receiver, per (job id, attempt).",
    ]
    if lost:
        lines.append(f"\n**FAILED: {lost} jobs did not succeed: {r['statuses']}.**")
    return "\n".join(lines)
