"""The soak: the design peak through the API for half an hour, watched minute by minute.

``soak``: 1,389 jobs/s (5 million an hour) created through the API by the load generator
(``tools/loadgen``: 10 users, requests of ``BULK`` jobs, each job due ``--soak-lead``
seconds after its request, default 5) for ``--soak-minutes`` minutes (default 30), on the
default topology:
2 schedulers, 2 executors, 4 shards on 2 PostgreSQL servers, the API under gunicorn.

Every ``SAMPLE_SECONDS`` it samples the memory of every process (``tools/bench/memory.py``:
each worker, the API, the broker's JVM, each PostgreSQL server with all its processes,
ZooKeeper, the load generator), the shard tables (``pg_total_relation_size`` of jobs,
its heap and indexes, live and dead tuples, autovacuum runs), the broker's disk use, the
page cache and the CPU by kind of process. Once every job has run it reads, from the
shards, each job's ``started_at - execute_at`` and ``dispatched_at - execute_at``.

Reported per minute: started - due p50/p99/max, created/s, started/s, the memory of each
process, table sizes, dead tuples and the machine's busy cores; how closely the p99
followed those (Pearson's r); and where the jobs over 1.5 x minute 2's p99 were: how much
of them the worst 2 % of the seconds hold, and their share of each shard's and each
partition's jobs. The result passes when (``soak_numbers``):

- every minute's p99 lateness is at most 100 ms, and none is above 1.5 x minute 2's;
- no process's memory (PSS less shared memory, see ``memory``) grows from minute 2 to
  the last: the least-squares slope over those minutes times their span is at most 10 %
  of the level (PostgreSQL's shared buffers are allocated at start and filled as the
  tables grow: reported, bounded by ``shared_buffers``, not tested);
- every scheduler and executor process peaks at 150 MiB RSS or less;
- every job created ran, none early.

Before the measured minutes, the same load runs for ``WARM_UP_SECONDS`` and its jobs are
deleted: the broker's JIT compiler, the API's workers and the databases' caches warm up
there (the first minute of a cold stack was up to a second late). Minutes are counted
from the first measured request (created/s, memory, tables, CPU) or from the first job's
due time (lateness, started/s): 5 s apart.

    make bench ARGS="--only soak"                      # 30 minutes
    make bench ARGS="--only soak --soak-minutes 5"     # a short run
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from django.conf import settings
from django.db import connections

from jobsvc.messaging.consumer_group import MessagingUnavailable, consumer_group_view
from jobsvc.sharding.shards import shard_alias, shard_ids
from tools.bench import memory, soak_numbers
from tools.bench.api_create import served_api
from tools.bench.processes import WorkerProcess
from tools.bench.scenario_stack import (
    PEAK_RATE,
    clean_slate,
    describe_setup,
    on_every_shard,
    scenario_env,
    started_workers,
    truncate_jobs,
    wait_for,
)
from tools.bench.soak_report import TABLE_FIELDS, Sample, soak_result
from tools.bench.stack_cpu import StackCpu

DEFAULT_MINUTES = 30
USERS = 10
WARM_UP_SECONDS = 60  # of the same load before the measured minutes (``_warm_up``)
BULK = 10  # jobs per create request: 139 requests a second at the design peak
# The load generator's keep-alive connections: twice the API's 4 sync workers, so that a
# slow request queues at the API instead of holding back the rate (a slot missed is lost).
CONNECTIONS = 8
SAMPLE_SECONDS = 5.0  # between samples of memory, tables and CPU
DRAIN_SECONDS = 60.0  # after the last request, for the last jobs to run
START_SLACK_SECONDS = 120.0  # the load generator's start-up and drain, beyond the minutes
EXECUTOR_JOIN_TIMEOUT = 60.0  # seconds for the executors' consumer group to settle
MIB = 1024**2


def run_soak(context) -> dict:
    minutes, lead = context.soak_minutes, context.soak_lead
    env = scenario_env(context, "soak")
    servers = _stack_servers()
    summary_file = context.out / "soak-loadgen.json"
    with (
        served_api(context, env=env) as api,
        clean_slate(),
        started_workers(context, env, schedulers=2, executors=2) as workers,
    ):
        _wait_for_executors(env, workers)
        _warm_up(env, context.out, api, workers, lead)
        load = (minutes * 60, lead)
        loadgen = _loadgen("soak-loadgen", env, context.out, api, load, summary_file)
        try:
            roles = _roles(workers, loadgen, servers)
            samples = _sample_until_done(
                loadgen, workers, roles, broker_root=servers["kafka"]["root"], minutes=minutes
            )
        finally:
            loadgen.stop()
        loadgen_summary = json.loads(summary_file.read_text())
        jobs = _job_numbers(minutes, lead)
    return soak_result(
        minutes=minutes,
        samples=samples,
        jobs=jobs,
        loadgen=loadgen_summary,
        roles=roles,
        setup=_setup(minutes, lead),
    )


def _setup(minutes: int, lead: float) -> str:
    return describe_setup(
        schedulers=2,
        executors=2,
        extra=f"{PEAK_RATE:,} jobs/s created through the API for {minutes} min by "
        f"tools/loadgen ({USERS} weight-1 users, requests of {BULK} jobs over "
        f"{CONNECTIONS} connections, each job due {lead:g} s after its "
        f"request), after {WARM_UP_SECONDS} s of the same load not measured (its jobs "
        f"deleted before the measured minutes); no-op handler; memory, tables and CPU "
        f"sampled every {SAMPLE_SECONDS:g} s, a minute's value the mean of its samples",
    )


def _wait_for_executors(env: dict[str, str], workers) -> None:
    """Until the executors' consumer group is stable with every executor holding
    partitions: the first minute measures the system, not the group's first join."""
    topic, group = env["JOBSVC_KAFKA_JOBS_TOPIC"], env["JOBSVC_EXECUTOR_GROUP_ID"]
    executors = sum(1 for worker in workers if worker.kind == "executor")

    def joined() -> bool:
        try:
            view = consumer_group_view(
                bootstrap=settings.KAFKA_BOOTSTRAP, group_id=group, topic=topic, timeout=5.0
            )
        except MessagingUnavailable:
            return False
        holding = [member for member in view.members if member.partitions]
        return view.state == "stable" and len(holding) == executors

    wait_for(joined, timeout=EXECUTOR_JOIN_TIMEOUT, what="the executors joined", workers=workers)


def _warm_up(env: dict[str, str], out: Path, api: str, workers, lead: float) -> None:
    """The same load for ``WARM_UP_SECONDS``, not measured, then its jobs deleted: the
    soak measures a running system, not the broker's JIT compiler and cold caches."""
    load = (WARM_UP_SECONDS, lead)
    warm_up = _loadgen("soak-warm-up", env, out, api, load, out / "soak-warm-up.json")
    try:
        wait_for(
            lambda: not warm_up.alive(),
            timeout=WARM_UP_SECONDS + DRAIN_SECONDS + START_SLACK_SECONDS,
            what="the warm-up's jobs ran",
            workers=workers,
        )
    finally:
        warm_up.stop()
    if warm_up.process.returncode != 0:
        raise RuntimeError(f"the warm-up's load generator failed:\n{warm_up.log()[-4000:]}")
    truncate_jobs()


def _loadgen(
    name: str,
    env: dict[str, str],
    out: Path,
    api: str,
    load: tuple[int, float],
    summary_file: Path,
) -> WorkerProcess:
    """The load generator at the design peak for ``load``'s seconds, each job due its
    lead seconds after its request, then draining."""
    return WorkerProcess(
        kind="loadgen",
        name=name,
        env=env,
        log_dir=out,
        argv=_loadgen_argv(api, *load, summary_file),
    )


def _loadgen_argv(api: str, seconds: int, lead: float, summary_file: Path) -> list[str]:
    return [
        *(sys.executable, "-m", "tools.loadgen", "--api", api),
        *("--users", str(USERS), "--rate", str(PEAK_RATE), "--bulk", str(BULK)),
        *("--lead", str(lead), "--horizon", "0"),
        *("--duration", str(seconds), "--drain", str(DRAIN_SECONDS)),
        *("--concurrency", str(CONNECTIONS), "--json", str(summary_file)),
    ]


# --- the processes --------------------------------------------------------------------


def _stack_servers() -> dict[str, dict]:
    """The bench stack's servers by name (``postgres-a``, ``kafka``, ...), from its manifest."""
    from tools.devstack.stack import MANIFEST_FILE, TEST_STACK_DIR_ENV

    manifest = json.loads((Path(os.environ[TEST_STACK_DIR_ENV]) / MANIFEST_FILE).read_text())
    return {server["name"]: server for server in manifest["servers"]}


def _roles(workers, loadgen: WorkerProcess, servers: dict[str, dict]) -> list[memory.Role]:
    counts: dict[str, int] = defaultdict(int)
    roles = []
    for worker in workers:
        counts[worker.kind] += 1
        roles.append(memory.Role(f"{worker.kind}-{counts[worker.kind]}", worker.pid))
    roles.append(memory.Role("api", _gunicorn_master(), tree=True))
    roles += [
        memory.Role(name, server["pid"], tree=True)
        for name, server in sorted(servers.items())
        if server["kind"] == "postgres"
    ]
    roles.append(memory.Role("broker", servers["kafka"]["pid"]))
    roles.append(memory.Role("zookeeper", servers["zookeeper"]["pid"]))
    roles.append(memory.Role("loadgen", loadgen.pid))
    return roles


def _gunicorn_master() -> int:
    """The API's gunicorn master: the child of this process running gunicorn."""
    children = memory.children_of(memory.parents()).get(os.getpid(), [])
    for pid in children:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if b"gunicorn" in cmdline.read():
                    return pid
        except OSError:
            continue
    raise RuntimeError("the API's gunicorn process is not a child of the bench")


def _sample_until_done(
    loadgen: WorkerProcess, workers, roles: list[memory.Role], *, broker_root: str, minutes: int
) -> list[Sample]:
    """Sample every SAMPLE_SECONDS until the load generator exits; fail if a worker dies,
    the load generator fails, or the run overruns."""
    cpu = StackCpu(launcher_pid=os.getppid())
    deadline = time.monotonic() + minutes * 60 + DRAIN_SECONDS + START_SLACK_SECONDS
    samples: list[Sample] = []
    next_at = time.monotonic()
    while loadgen.alive():
        dead = [worker.name for worker in workers if not worker.alive()]
        if dead:
            raise RuntimeError(f"{', '.join(dead)} exited during the soak")
        if time.monotonic() > deadline:
            raise RuntimeError("the load generator overran the soak's time")
        tables, indexes = _table_stats()
        samples.append(
            Sample(
                at=time.time(),
                memory=memory.sample(roles),
                tables=tables,
                indexes=indexes,
                cpu=cpu.sample(),
                broker_disk_mib=memory.directory_mib(broker_root),
                page_cache_mib=memory.page_cache_mib(),
                counters=_io_counters(),
            )
        )
        next_at += SAMPLE_SECONDS
        # The pace of the samples, not a synchronisation: wakes early when it exits.
        with contextlib.suppress(subprocess.TimeoutExpired):
            loadgen.process.wait(timeout=max(0.0, next_at - time.monotonic()))
    if loadgen.process.returncode != 0:
        raise RuntimeError(f"the load generator failed:\n{loadgen.log()[-4000:]}")
    return samples


# --- the shards -----------------------------------------------------------------------

_TABLE_SQL = """
SELECT pg_total_relation_size('jobs'), pg_relation_size('jobs'), pg_indexes_size('jobs'),
       n_live_tup, n_dead_tup, autovacuum_count + vacuum_count
  FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass
"""
_INDEX_SQL = """
SELECT indexrelname, pg_relation_size(indexrelid)
  FROM pg_stat_user_indexes WHERE relid = 'jobs'::regclass
"""
_BLOCKS_SQL = """
SELECT blks_read, blks_hit FROM pg_stat_database WHERE datname = current_database()
"""


def _table_stats() -> tuple[dict[str, float], dict[str, float]]:
    """The jobs tables of all shards, summed: sizes in MiB, tuples, vacuums; and each
    index's size in MiB."""
    tables: dict[str, float] = defaultdict(float)
    indexes: dict[str, float] = defaultdict(float)
    for shard_id in shard_ids():
        with connections[shard_alias(shard_id)].cursor() as cursor:
            cursor.execute(_TABLE_SQL)
            row = cursor.fetchone()
            cursor.execute(_INDEX_SQL)
            index_rows = cursor.fetchall()
        for name, value in zip(TABLE_FIELDS, row, strict=True):
            tables[name] += value / MIB if name.endswith("_mib") else value
        for name, size in index_rows:
            indexes[name] += size / MIB
    return dict(tables), dict(indexes)


def _io_counters() -> dict[str, float]:
    """Blocks the shards read from outside shared buffers and found in them, summed, and
    the machine's CPU seconds waiting on I/O (/proc/stat), so far."""
    counters = {"blocks_read": 0.0, "blocks_hit": 0.0}
    for shard_id in shard_ids():
        with connections[shard_alias(shard_id)].cursor() as cursor:
            cursor.execute(_BLOCKS_SQL)
            read, hit = cursor.fetchone()
        counters["blocks_read"] += read
        counters["blocks_hit"] += hit
    with open("/proc/stat") as stat:
        ticks = stat.readline().split()
    counters["iowait_seconds"] = int(ticks[5]) / os.sysconf("SC_CLK_TCK")
    return counters


def _histogram_sql(column: str) -> str:
    # Jobs by due minute (from the first due time) and whole ms of column - execute_at.
    return (
        "SELECT floor((extract(epoch FROM execute_at) - %(t0)s) / 60)::int,"
        f" round(extract(epoch FROM {column} - execute_at) * 1000)::int, count(*)"
        f" FROM jobs WHERE {column} IS NOT NULL GROUP BY 1, 2"
    )


def _per_minute_sql(column: str, since: str) -> str:
    return (
        f"SELECT floor((extract(epoch FROM {column}) - %({since})s) / 60)::int, count(*)"
        f" FROM jobs WHERE {column} IS NOT NULL GROUP BY 1"
    )


# Jobs, and jobs later than %(late_ms)s (whole ms, as the histograms), by due second (from
# the first due time), shard and partition.
_LATE_SQL = """
SELECT floor(extract(epoch FROM execute_at) - %(t0)s)::int, shard_id, dispatch_partition,
       count(*), count(*) FILTER (WHERE round(extract(epoch FROM started_at - execute_at)
                                             * 1000) > %(late_ms)s)
  FROM jobs WHERE started_at IS NOT NULL GROUP BY 1, 2, 3
"""


def _job_numbers(minutes: int, lead: float) -> dict:
    """Every job of the run (the scenario emptied the shards first), from the shards."""
    firsts = [
        t for (t,) in on_every_shard("SELECT extract(epoch FROM min(execute_at)) FROM jobs") if t
    ]
    if not firsts:
        raise RuntimeError("the soak created no jobs")
    t0 = float(min(firsts))  # the first due time
    params = {"t0": t0, "c0": t0 - lead}  # c0: about the first request
    statuses: dict[str, int] = defaultdict(int)
    early = 0
    for status, count, started_early in on_every_shard(
        "SELECT status, count(*), count(*) FILTER (WHERE started_at < execute_at)"
        " FROM jobs GROUP BY 1"
    ):
        statuses[status] += count
        early += started_early
    created: dict[int, int] = defaultdict(int)
    for minute, count in on_every_shard(_per_minute_sql("created_at", "c0"), params):
        created[minute] += count
    started: dict[int, int] = defaultdict(int)
    for minute, count in on_every_shard(_per_minute_sql("started_at", "t0"), params):
        started[minute] += count
    started_minus_due = soak_numbers.merge_histograms(
        on_every_shard(_histogram_sql("started_at"), params)
    )
    late_ms = soak_numbers.creep_bound_ms(started_minus_due)
    return {
        "first_due": t0,
        "first_request": params["c0"],
        "statuses": dict(statuses),
        "early": early,
        "started_minus_due": started_minus_due,
        "late_ms": late_ms,
        "late_rows": []
        if late_ms is None
        else on_every_shard(_LATE_SQL, {**params, "late_ms": late_ms}),
        "dispatched_minus_due": soak_numbers.merge_histograms(
            on_every_shard(_histogram_sql("dispatched_at"), params)
        ),
        "created_per_minute": dict(created),
        "started_per_minute": dict(started),
    }
