"""End-to-end throughput: overdue jobs from due to succeeded, through the real workers.

Each run bulk-loads N overdue jobs with the default (no-op) handler straight into the
shards (COPY, spread evenly over every shard and over a few users), then starts
``run_scheduler`` and ``run_executor`` processes on fresh topics and a fresh consumer group
and waits until every job has succeeded. It reports:

- ``jobs_per_second``: N / (last finished_at - the moment the workers were started), so
  process start-up and the consumer group's first join count against it;
- ``steady_jobs_per_second``: the middle 80 % of the jobs over the time they took to
  finish (10th to 90th percentile of finished_at), the rate once everything runs;
- latency from dispatch (queued) to finished, p50 and p99;
- the peak resident memory (RSS) of the largest executor and scheduler, sampled while
  the run lasts;
- CPU time per job of each kind of process of the stack (executors, schedulers,
  PostgreSQL, the broker, ZooKeeper), read from /proc, and the CPU the rest of the
  machine used meanwhile: on a shared machine other load lowers the rate, while CPU per
  job says what the stack itself costs.

Issue 4's target is 10,000 jobs/s on a 2-core machine that also runs the whole stack.

    make bench ARGS="--quick --only end_to_end"
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import connections
from django.utils import timezone

from jobsvc.accounts.models import User
from jobsvc.jobs import store
from jobsvc.jobs.specs import JobSpec
from jobsvc.sharding.ids import new_job_id
from jobsvc.sharding.shards import shard_alias, shard_ids
from tools.bench.processes import WorkerProcess
from tools.bench.scenario_stack import isolated_env
from tools.bench.stack_cpu import CpuUsed, StackCpu

FULL_JOBS = 500_000
QUICK_JOBS = 50_000
BENCH_USERS = 8  # jobs are spread round-robin over this many users
COPY_CHUNK = 20_000  # rows per COPY statement
POLL_SECONDS = 0.5  # between progress checks while a run lasts
MIN_RUN_TIMEOUT = 120.0  # seconds a run may take at least; more for large runs
TARGET_JOBS_PER_SECOND = 10_000


@dataclass(frozen=True)
class RunConfig:
    schedulers: int
    executors: int
    env: dict[str, str] = field(default_factory=dict)  # worker settings beyond the defaults

    @property
    def label(self) -> str:
        changed = ", ".join(f"{k.removeprefix('JOBSVC_')}={v}" for k, v in self.env.items())
        return changed or "defaults"


# One run each. The first is the recommended deployment for this machine; the others
# show how the figure moves with the number of processes and the executor's batch size.
CONFIGS = (
    RunConfig(1, 2, {"JOBSVC_EXECUTOR_BATCH_SIZE": "2000"}),
    RunConfig(1, 2),
    RunConfig(2, 2, {"JOBSVC_EXECUTOR_BATCH_SIZE": "2000"}),
    RunConfig(1, 1, {"JOBSVC_EXECUTOR_BATCH_SIZE": "2000"}),
)


@dataclass(frozen=True)
class RunResult:
    schedulers: int
    executors: int
    settings: str
    jobs: int
    seconds: float  # from starting the workers to the last job finished
    jobs_per_second: float
    steady_jobs_per_second: float
    first_finished_after: float  # seconds from start: process start-up and group join
    latency_ms_p50: float  # dispatched -> finished
    latency_ms_p99: float
    executor_rss_mb_peak: float  # the largest executor
    scheduler_rss_mb_peak: float
    cpu_us_per_job: dict[str, float]  # once jobs finish: by kind of process, and "total"
    other_load_cores: float  # mean CPU cores the rest of the machine used meanwhile


def run_end_to_end(context) -> dict:
    """The bench-suite scenario: every configuration in CONFIGS, one after the other."""
    jobs = QUICK_JOBS if context.quick else FULL_JOBS
    users = _bench_users()
    # The first configuration once first, not measured: a run measures a running system,
    # not the broker's JIT compiler and cold caches. Run on its own (--only end_to_end), the
    # first configuration otherwise spent 21-22 us of broker CPU per job, against 6 after
    # other scenarios, and drained 15 % slower; after a tenth as many jobs, 17 us.
    run_once(env=context.env, log_dir=context.out, users=users, jobs=jobs, config=CONFIGS[0])
    results = [
        run_once(env=context.env, log_dir=context.out, users=users, jobs=jobs, config=config)
        for config in CONFIGS
    ]
    return {
        "setup": (
            f"{jobs:,} overdue jobs per run with the default no-op handler, COPY-loaded evenly "
            f"into {len(shard_ids())} shards on 2 PostgreSQL servers, {BENCH_USERS} users; "
            f"run_scheduler and run_executor processes (settings: defaults but those listed), "
            f"a {settings.KAFKA_JOBS_PARTITIONS}-partition jobs topic on Apache Kafka, ZooKeeper; "
            f"all on this one {os.cpu_count()}-core machine; the first configuration runs "
            "once more first, not measured. "
            f"Target: {TARGET_JOBS_PER_SECOND:,} jobs/s."
        ),
        "target_jobs_per_second": TARGET_JOBS_PER_SECOND,
        "results": [asdict(r) for r in results],
        "markdown": markdown_table(results),
    }


def run_once(
    *, env: dict[str, str], log_dir: Path, users: list[int], jobs: int, config: RunConfig
) -> RunResult:
    """Load ``jobs`` overdue jobs, run them through the workers, measure, clean up."""
    _load(users, jobs)
    worker_env = isolated_env(env, "end-to-end", **config.env)
    cpu = StackCpu(launcher_pid=os.getppid())
    # CPU used, jobs left and the time, at the first check that finds jobs finished.
    steady_from: tuple[dict[str, float], int, float] | None = None
    started_wall = timezone.now()
    started = time.monotonic()
    processes = [
        WorkerProcess(
            kind=kind,
            name=f"bench-{kind}-{n}-{uuid.uuid4().hex[:4]}",
            env=worker_env,
            log_dir=log_dir,
        )
        for kind, count in (("scheduler", config.schedulers), ("executor", config.executors))
        for n in range(count)
    ]
    peak_rss: dict[str, float] = {"scheduler": 0.0, "executor": 0.0}
    try:
        deadline = started + max(MIN_RUN_TIMEOUT, jobs / 1000)
        while (left := _unfinished(users)) > 0:
            if steady_from is None and left < jobs:  # start-up is over: jobs finish
                steady_from = (cpu.sample(), left, time.monotonic())
            for process in processes:
                if not process.alive():
                    raise RuntimeError(f"{process.name} exited:\n{process.log()[-4000:]}")
                peak_rss[process.kind] = max(peak_rss[process.kind], _rss_mb(process.pid))
            if time.monotonic() > deadline:
                raise RuntimeError(f"{_unfinished(users)} jobs unfinished after the deadline")
            time.sleep(POLL_SECONDS)  # pacing the progress check, not synchronisation
        # Sampled before the workers stop, while their CPU time is still readable.
        cpu_after, ended = cpu.sample(), time.monotonic()
        cpu_before, cpu_jobs, cpu_from = steady_from or (cpu_after, 0, ended)
    finally:
        for process in processes:
            process.stop()
    finished, latencies = _finish_times(users, started_wall)
    _clean(users)
    return _result(
        config=config,
        finished=finished,
        latencies=latencies,
        peak_rss=peak_rss,
        cpu_used=CpuUsed.between(cpu_before, cpu_after, ended - cpu_from),
        cpu_jobs=cpu_jobs,
    )


def _result(
    *,
    config: RunConfig,
    finished: list[float],
    latencies: list[float],
    peak_rss: dict[str, float],
    cpu_used: CpuUsed,
    cpu_jobs: int,
) -> RunResult:
    """``cpu_used``: CPU seconds by kind while the last ``cpu_jobs`` jobs ran (start-up
    excluded)."""
    jobs = len(finished)
    finished.sort()
    latencies.sort()
    t10, t90 = finished[int(jobs * 0.1)], finished[int(jobs * 0.9) - 1]
    cores = cpu_used.cores()
    return RunResult(
        schedulers=config.schedulers,
        executors=config.executors,
        settings=config.label,
        jobs=jobs,
        seconds=round(finished[-1], 2),
        jobs_per_second=round(jobs / finished[-1]),
        steady_jobs_per_second=round(0.8 * jobs / max(t90 - t10, 1e-3)),
        first_finished_after=round(finished[0], 2),
        latency_ms_p50=round(1000 * statistics.median(latencies), 1),
        latency_ms_p99=round(1000 * latencies[int(len(latencies) * 0.99) - 1], 1),
        executor_rss_mb_peak=round(peak_rss["executor"], 1),
        scheduler_rss_mb_peak=round(peak_rss["scheduler"], 1),
        cpu_us_per_job=cpu_used.per_job_us(cpu_jobs),
        other_load_cores=round(max(0.0, cores["machine"] - cores["stack"]), 2),
    )


def markdown_table(results: list[RunResult]) -> str:
    lines = [
        "| schedulers | executors | settings | jobs | seconds | jobs/s | steady jobs/s | "
        "first done s | latency p50 / p99 ms | executor / scheduler RSS MB | "
        "CPU µs per job (exec / sched / pg / broker) | other load, cores |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        cpu = r.cpu_us_per_job
        lines.append(
            f"| {r.schedulers} | {r.executors} | {r.settings} | {r.jobs:,} | {r.seconds:.1f} | "
            f"{r.jobs_per_second:,} | {r.steady_jobs_per_second:,} | "
            f"{r.first_finished_after:.1f} | {r.latency_ms_p50:,.0f} / {r.latency_ms_p99:,.0f} | "
            f"{r.executor_rss_mb_peak:.0f} / {r.scheduler_rss_mb_peak:.0f} | "
            f"{cpu['total']:.0f} ({cpu.get('executor', 0):.0f} / {cpu.get('scheduler', 0):.0f} / "
            f"{cpu.get('postgres', 0):.0f} / {cpu.get('broker', 0):.0f}) | "
            f"{r.other_load_cores:.2f} |"
        )
    return "\n".join(lines)


# --- the database side ----------------------------------------------------------------


def _bench_users() -> list[int]:
    suffix = uuid.uuid4().hex[:8]
    return [User.objects.create(username=f"bench-e2e-{suffix}-{n}").pk for n in range(BENCH_USERS)]


def _load(users: list[int], jobs: int) -> None:
    """``jobs`` jobs due a minute ago, evenly over the shards and round-robin over users."""
    now = timezone.now()
    spec = JobSpec(
        message="bench",
        execute_at=now - timedelta(minutes=1),
        max_attempts=settings.JOB_DEFAULT_MAX_ATTEMPTS,
        timeout_seconds=settings.JOB_DEFAULT_TIMEOUT_SECONDS,
    )
    shards = list(shard_ids())
    for shard_id in shards:
        count = jobs // len(shards) + (1 if shard_id < jobs % len(shards) else 0)
        alias = shard_alias(shard_id)
        for start in range(0, count, COPY_CHUNK):
            rows = [
                store.new_job_row(
                    job_id=new_job_id(shard_id=shard_id, at=now),
                    user_id=users[n % len(users)],
                    spec=spec,
                    shard_id=shard_id,
                    now=now,
                )
                for n in range(start, min(count, start + COPY_CHUNK))
            ]
            store.insert_jobs(alias, rows)
        with connections[alias].cursor() as cursor:
            cursor.execute("ANALYZE jobs")
            # Each run starts right after a checkpoint: none of them pays for the WAL of
            # the loads and runs before it.
            cursor.execute("CHECKPOINT")


def _unfinished(users: list[int]) -> int:
    """The bench users' jobs not yet terminal; both counts use a partial index, so they
    stay cheap while a run lasts."""
    total = 0
    for alias in _aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute(
                "SELECT (SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')"
                "                                   AND user_id = ANY(%(users)s))"
                "     + (SELECT count(*) FROM jobs WHERE status = 'scheduled'"
                "                                   AND user_id = ANY(%(users)s))",
                {"users": users},
            )
            total += cursor.fetchone()[0]
    return total


def _finish_times(users: list[int], started_wall: datetime) -> tuple[list[float], list[float]]:
    """Per job: seconds from ``started_wall`` to finished, and from dispatched to finished."""
    finished: list[float] = []
    latencies: list[float] = []
    for alias in _aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute(
                "SELECT status, extract(epoch FROM finished_at - %s)::float8,"
                "       extract(epoch FROM finished_at - dispatched_at)::float8"
                "  FROM jobs WHERE user_id = ANY(%s)",
                [started_wall, users],
            )
            for status, since_start, latency in cursor.fetchall():
                if status != "succeeded":
                    raise RuntimeError(f"a bench job ended {status}, not succeeded")
                finished.append(since_start)
                latencies.append(latency)
    return finished, latencies


def _clean(users: list[int]) -> None:
    """Delete the run's jobs and compact the table and its indexes (VACUUM FULL), so that
    every run starts from the same state rather than from the last one's dead rows."""
    for alias in _aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute("DELETE FROM jobs WHERE user_id = ANY(%s)", [users])
            cursor.execute("VACUUM FULL ANALYZE jobs")


def _aliases() -> list[str]:
    return [shard_alias(shard_id) for shard_id in shard_ids()]


# --- the processes' side ----------------------------------------------------------------


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return 0.0
