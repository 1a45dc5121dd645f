"""The soak: the design peak through the API for half an hour, watched minute by minute.

``soak``: 1,389 jobs/s (5 million an hour) created through the API by the load generator
(``tools/loadgen``: 10 users, requests of ``BULK`` jobs, each job due ``LEAD_SECONDS``
after its request) for ``--soak-minutes`` minutes (default 30), on the default topology:
2 schedulers, 2 executors, 4 shards on 2 PostgreSQL servers, the API under gunicorn.

Every ``SAMPLE_SECONDS`` it samples the memory of every process (``tools/bench/memory.py``:
each worker, the API, the broker's JVM, each PostgreSQL server with all its processes,
ZooKeeper, the load generator), the shard tables (``pg_total_relation_size`` of jobs,
its heap and indexes, live and dead tuples, autovacuum runs), the broker's disk use, the
page cache and the CPU by kind of process. Once every job has run it reads, from the
shards, each job's ``started_at - execute_at`` and ``dispatched_at - execute_at``.

Reported per minute: started - due p50/p99/max, created/s, started/s, the memory of each
process, table sizes, dead tuples and the machine's busy cores; and how closely the p99
followed those (Pearson's r). The result passes when (``soak_numbers``):

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
from dataclasses import dataclass, field
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
from tools.bench.stack_cpu import StackCpu

DEFAULT_MINUTES = 30
USERS = 10
LEAD_SECONDS = 5.0  # from a job's create request to its execute_at
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


@dataclass(frozen=True)
class Sample:
    at: float  # Unix time
    memory: dict[str, dict[str, float]]  # role -> rss, pss, pss_anon, ... in MiB
    tables: dict[str, float]  # the shards' jobs tables, summed
    indexes: dict[str, float]  # MiB by index name, summed over the shards
    cpu: dict[str, float]  # CPU seconds so far by kind of process
    broker_disk_mib: float
    page_cache_mib: float
    # Counters so far: the shards' blocks read from outside shared buffers and found in
    # them (pg_stat_database), and the machine's CPU seconds waiting on I/O.
    counters: dict[str, float] = field(default_factory=dict)


def run_soak(context) -> dict:
    minutes = context.soak_minutes
    env = scenario_env(context, "soak")
    servers = _stack_servers()
    summary_file = context.out / "soak-loadgen.json"
    with (
        served_api(context, env=env) as api,
        clean_slate(),
        started_workers(context, env, schedulers=2, executors=2) as workers,
    ):
        _wait_for_executors(env, workers)
        _warm_up(env, context.out, api, workers)
        loadgen = _loadgen("soak-loadgen", env, context.out, api, minutes * 60, summary_file)
        try:
            roles = _roles(workers, loadgen, servers)
            samples = _sample_until_done(
                loadgen, workers, roles, broker_root=servers["kafka"]["root"], minutes=minutes
            )
        finally:
            loadgen.stop()
        loadgen_summary = json.loads(summary_file.read_text())
        jobs = _job_numbers(minutes)
    return soak_result(
        minutes=minutes, samples=samples, jobs=jobs, loadgen=loadgen_summary, roles=roles
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


def _warm_up(env: dict[str, str], out: Path, api: str, workers) -> None:
    """The same load for ``WARM_UP_SECONDS``, not measured, then its jobs deleted: the
    soak measures a running system, not the broker's JIT compiler and cold caches."""
    warm_up = _loadgen("soak-warm-up", env, out, api, WARM_UP_SECONDS, out / "soak-warm-up.json")
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
    name: str, env: dict[str, str], out: Path, api: str, seconds: int, summary_file: Path
) -> WorkerProcess:
    """The load generator at the design peak for ``seconds``, then draining."""
    return WorkerProcess(
        kind="loadgen",
        name=name,
        env=env,
        log_dir=out,
        argv=_loadgen_argv(api, seconds, summary_file),
    )


def _loadgen_argv(api: str, seconds: int, summary_file: Path) -> list[str]:
    return [
        *(sys.executable, "-m", "tools.loadgen", "--api", api),
        *("--users", str(USERS), "--rate", str(PEAK_RATE), "--bulk", str(BULK)),
        *("--lead", str(LEAD_SECONDS), "--horizon", "0"),
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
_TABLE_FIELDS = ("total_mib", "heap_mib", "indexes_mib", "live_tuples", "dead_tuples", "vacuums")


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
        for name, value in zip(_TABLE_FIELDS, row, strict=True):
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


def _job_numbers(minutes: int) -> dict:
    """Every job of the run (the scenario emptied the shards first), from the shards."""
    firsts = [
        t for (t,) in on_every_shard("SELECT extract(epoch FROM min(execute_at)) FROM jobs") if t
    ]
    if not firsts:
        raise RuntimeError("the soak created no jobs")
    t0 = float(min(firsts))  # the first due time
    params = {"t0": t0, "c0": t0 - LEAD_SECONDS}  # c0: about the first request
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
    return {
        "first_due": t0,
        "first_request": params["c0"],
        "statuses": dict(statuses),
        "early": early,
        "started_minus_due": soak_numbers.merge_histograms(
            on_every_shard(_histogram_sql("started_at"), params)
        ),
        "dispatched_minus_due": soak_numbers.merge_histograms(
            on_every_shard(_histogram_sql("dispatched_at"), params)
        ),
        "created_per_minute": dict(created),
        "started_per_minute": dict(started),
    }


# --- the result -----------------------------------------------------------------------


def soak_result(
    *, minutes: int, samples: list[Sample], jobs: dict, loadgen: dict, roles: list[memory.Role]
) -> dict:
    """The scenario's numbers, checks and table from what the run collected."""
    start = jobs["first_request"]
    lateness = soak_numbers.minute_lateness(jobs["started_minus_due"], minutes)
    dispatch = soak_numbers.minute_lateness(jobs["dispatched_minus_due"], minutes)
    memory_by_role = _memory_series(samples, [role.name for role in roles], start, minutes)
    tables = {
        name: soak_numbers.minute_levels(
            [(s.at, s.tables.get(name, 0.0)) for s in samples], start=start, minutes=minutes
        )
        for name in _TABLE_FIELDS
    }
    index_names = sorted({name for s in samples for name in s.indexes})
    tables["index_mib"] = {
        name: soak_numbers.minute_levels(
            [(s.at, s.indexes.get(name, 0.0)) for s in samples], start=start, minutes=minutes
        )
        for name in index_names
    }
    kinds = sorted({kind for s in samples for kind in s.cpu if kind != StackCpu.MACHINE})
    cpu_cores = {
        kind: soak_numbers.minute_rates(
            [(s.at, s.cpu.get(kind, 0.0)) for s in samples], start=start, minutes=minutes
        )
        for kind in [*kinds, StackCpu.MACHINE]
    }
    created_per_s = soak_numbers.per_minute_rate(jobs["created_per_minute"], minutes)
    checks = {
        "rate_held": soak_numbers.rate_check(created_per_s, PEAK_RATE),
        **_checks(lateness, memory_by_role, jobs, loadgen),
    }
    result = {
        "minutes": minutes,
        "rate_per_second": PEAK_RATE,
        "per_minute": {
            "created_per_s": created_per_s,
            "started_per_s": soak_numbers.per_minute_rate(jobs["started_per_minute"], minutes),
            "started_minus_due_ms": lateness,
            "dispatched_minus_due_ms": dispatch,
        },
        "memory_mib": memory_by_role,
        "tables": tables,
        "broker_disk_mib": soak_numbers.minute_levels(
            [(s.at, s.broker_disk_mib) for s in samples], start=start, minutes=minutes
        ),
        "page_cache_mib": soak_numbers.minute_levels(
            [(s.at, s.page_cache_mib) for s in samples], start=start, minutes=minutes
        ),
        "cpu_cores": cpu_cores,
        # Per second in each minute: blocks the shards read from outside their shared
        # buffers and found in them, and the machine's cores waiting on I/O.
        "io": {
            name: soak_numbers.minute_rates(
                [(s.at, s.counters[counter]) for s in samples if counter in s.counters],
                start=start,
                minutes=minutes,
            )
            for name, counter in (
                ("blocks_read_per_s", "blocks_read"),
                ("blocks_hit_per_s", "blocks_hit"),
                ("iowait_cores", "iowait_seconds"),
            )
        },
        "statuses": jobs["statuses"],
        "early": jobs["early"],
        "loadgen": {
            key: loadgen.get(key)
            for key in (
                "created",
                "created_per_second",
                "executed",
                "statuses",
                "unfinished",
                "errors",
                "dropped_slots",
                "request_latency",
            )
        },
        "samples": len(samples),
        "checks": checks,
        "passed": all(check["passed"] for check in checks.values()),
        "setup": describe_setup(
            schedulers=2,
            executors=2,
            extra=f"{PEAK_RATE:,} jobs/s created through the API for {minutes} min by "
            f"tools/loadgen ({USERS} weight-1 users, requests of {BULK} jobs over "
            f"{CONNECTIONS} connections, each job due {LEAD_SECONDS:g} s after its "
            f"request), after {WARM_UP_SECONDS} s of the same load not measured (its jobs "
            f"deleted before the measured minutes); no-op handler; memory, tables and CPU "
            f"sampled every {SAMPLE_SECONDS:g} s, a minute's value the mean of its samples",
        ),
    }
    result["markdown"] = soak_markdown(result)
    return result


def _memory_series(
    samples: list[Sample], roles: list[str], start: float, minutes: int
) -> dict[str, dict]:
    series = {}
    for role in roles:
        measures = {}
        for measure in ("rss", "pss", "pss_anon", "pss_file", "pss_shmem", "unshared"):
            points = [
                (s.at, value)
                for s in samples
                if (value := _measure(s.memory.get(role, {}), measure)) is not None
            ]
            if points:
                measures[f"{measure}_mib"] = soak_numbers.minute_levels(
                    points, start=start, minutes=minutes
                )
        rss = [s.memory.get(role, {}).get("rss", 0.0) for s in samples]
        measures["peak_rss_mib"] = round(max(rss, default=0.0), 1)
        measures["growth"] = soak_numbers.growth(measures.get("unshared_mib", []))
        series[role] = measures
    return series


def _measure(memory: dict[str, float], measure: str) -> float | None:
    """One measure of a role's memory; ``unshared`` is its PSS less shared memory (the
    growth test's measure: PostgreSQL allocates its shared buffers at start and its
    backends touch them over the run, which PSS would count as growth)."""
    if measure != "unshared":
        return memory.get(measure)
    if "pss" not in memory:
        return None
    return round(memory["pss"] - memory.get("pss_shmem", 0.0), 1)


def _checks(lateness: list[dict], memory_by_role: dict, jobs: dict, loadgen: dict) -> dict:
    grown = sorted(
        role
        for role, measures in memory_by_role.items()
        if role != "loadgen" and measures["growth"]["grows"]
    )
    worker_peaks = {
        role: measures["peak_rss_mib"]
        for role, measures in memory_by_role.items()
        if role.startswith(("scheduler", "executor"))
    }
    created = loadgen.get("created", 0)
    succeeded = jobs["statuses"].get("succeeded", 0)
    return {
        "lateness": soak_numbers.lateness_checks(lateness),
        "memory_growth": {
            "tolerance": soak_numbers.GROWTH_TOLERANCE,
            "grown": grown,
            "passed": not grown,
        },
        "worker_rss": {
            "limit_mib": soak_numbers.WORKER_RSS_LIMIT_MIB,
            "peaks_mib": worker_peaks,
            "passed": all(
                peak <= soak_numbers.WORKER_RSS_LIMIT_MIB for peak in worker_peaks.values()
            ),
        },
        "every_job_ran": {
            "created": created,
            "succeeded": succeeded,
            "early": jobs["early"],
            "passed": created > 0 and succeeded == created and jobs["early"] == 0,
        },
    }


def _cell(value, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _signed(value) -> str:
    return "-" if value is None else f"{value:+,.1f}"


def soak_markdown(result: dict) -> str:
    """A row per minute, then the checks."""
    per_minute, memory_by_role, tables = (
        result["per_minute"],
        result["memory_mib"],
        result["tables"],
    )
    roles = [role for role in memory_by_role if role != "loadgen"]
    busy = result["cpu_cores"][StackCpu.MACHINE]
    lines = [
        "| min | created/s | started/s | started - due p50 / p99 / max ms "
        "| dispatched - due p99 ms "
        + "".join(f"| {role} MiB " for role in roles)
        + "| jobs tables MiB (indexes) | dead tuples | cores busy |",
        "|---:|---:|---:|---:|---:" + "|---:" * len(roles) + "|---:|---:|---:|",
    ]
    for minute in range(result["minutes"]):
        late = per_minute["started_minus_due_ms"][minute]
        lines.append(
            f"| {minute + 1} | {_cell(per_minute['created_per_s'][minute])} "
            f"| {_cell(per_minute['started_per_s'][minute])} "
            f"| {_cell(late['p50_ms'])} / {_cell(late['p99_ms'])} / {_cell(late['max_ms'])} "
            f"| {_cell(per_minute['dispatched_minus_due_ms'][minute]['p99_ms'])} "
            + "".join(f"| {_cell(memory_by_role[role]['pss_mib'][minute])} " for role in roles)
            + f"| {_cell(tables['total_mib'][minute])} ({_cell(tables['indexes_mib'][minute])}) "
            f"| {_cell(tables['dead_tuples'][minute])} "
            f"| {_cell(busy[minute], 2)} |"
        )
    checks = result["checks"]
    held, late, grown, rss, ran = (
        checks["rate_held"],
        checks["lateness"],
        checks["memory_growth"],
        checks["worker_rss"],
        checks["every_job_ran"],
    )
    drifted = soak_numbers.drift(result)
    lines += [
        "",
        f"**{'Passed' if result['passed'] else 'Failed'}.** "
        f"Load: at least {held['at_least']:,.0f} jobs/s created in every minute "
        f"({_over(held['minutes_short'])}). "
        f"Lateness: p99 at most {late['p99_limit_ms']:g} ms in every minute "
        f"({_over(late['minutes_over_limit'])}), "
        f"none above {late['creep_limit']:g} x minute 2's {_cell(late['minute_2_p99_ms'])} ms "
        f"({_crept(late['minutes_crept'])}). "
        f"Memory growth from minute 2 on (slope x span over {grown['tolerance']:.0%} of the "
        f"level): {', '.join(grown['grown']) or 'none'}. "
        f"Worker peak RSS: {', '.join(f'{r} {v:.0f}' for r, v in rss['peaks_mib'].items())} MiB "
        f"(limit {rss['limit_mib']:g}). "
        f"Jobs: {ran['created']:,} created, {ran['succeeded']:,} succeeded, {ran['early']} early.",
        "",
        "Cores busy: the whole machine's, which the stack and the load generator share. "
        "Correlation of a minute's p99 lateness with them: "
        f"{_cell(soak_numbers.p99_follows_busy_cores(result), 2)} (Pearson's r). "
        f"From minute 2 on, p99 lateness moved {_signed(drifted['p99_trend_ms'])} ms "
        "(slope x span), and the load generator's CPU, for the same work every minute, "
        f"was x{_cell(drifted['loadgen_cpu'], 2)} in the later half of the minutes against "
        "the earlier half: the machine's speed moving shows there.",
        "",
        "Memory is PSS (shared pages split between the processes that map them), summed "
        "over a server's processes; the growth test leaves out shared memory (PostgreSQL's "
        "shared buffers, allocated at start and touched over the run: pss_shmem_mib in "
        "results.json). Minutes count from the first request (lateness and started/s from "
        "the first due time, 5 s later).",
    ]
    return "\n".join(lines)


def _minutes(minutes: list[int]) -> str:
    return ", ".join(str(m) for m in minutes)


def _over(minutes: list[int]) -> str:
    return "yes" if not minutes else f"no: minutes {_minutes(minutes)}"


def _crept(crept: list[int] | None) -> str:
    if crept is None:
        return "no minute 2 to compare with"
    return "none did" if not crept else f"minutes {_minutes(crept)} did"
