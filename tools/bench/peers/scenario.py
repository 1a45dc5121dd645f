"""The ``peers`` scenario: jobsvc, PgQueuer and Celery measured the same way on the same
machine and stack, for ``docs/benchmarks.md`` to show side by side.

Two measurements each, no-op jobs throughout:

- **drain**: N jobs due now (100,000; quick: 20,000) are written before the workers
  start; jobs over the time from the first start to the last (``records.drain_numbers``).
- **lateness**: jobs due at a steady 1,389 a second for a minute (quick: 20 s), all
  created before the first is due, with the workers running; start - due p50/p99/max.

jobsvc takes the paths the other scenarios take: the backlog COPY-loaded into the shards
as ``end_to_end`` does, and the lateness run of ``dispatch_lateness`` (jobs created
through the API in requests of 1,000); 2 schedulers and 2 executors, 4 shards on 2
PostgreSQL servers. Each peer gets 2 worker processes and its documented fast path
(``pgqueuer_peer``, ``celery_peer``): PgQueuer on a database of its own on the bench
stack's first PostgreSQL server (the same settings as the shards), Celery on a Redis
server (Debian's ``redis-server``) this scenario starts on a free loopback port. The peers
run from a venv of their own (``venv.py``), with the packages ``requirements.txt`` pins.

    make bench ARGS="--only peers"            # or --quick
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import connections
from django.utils import timezone

from jobsvc.sharding.shards import shard_alias, shard_ids
from tools.bench.dispatch import run_lateness
from tools.bench.fairness import _wait_until_all_finished
from tools.bench.peers.records import (
    RECORD_DIR_ENV,
    censored_lateness,
    count_starts,
    drain_numbers,
    read_starts,
)
from tools.bench.peers.venv import installed_versions, peers_venv
from tools.bench.processes import REPO, WorkerProcess
from tools.bench.scenario_stack import (
    PEAK_RATE,
    clean_slate,
    load_spread,
    on_every_shard,
    scenario_env,
    started_workers,
)
from tools.devstack.ports import free_port

DRAIN_JOBS = 100_000
QUICK_DRAIN_JOBS = 20_000
DRAIN_USERS = 10  # jobsvc's backlog is spread over this many users
WORKERS = 2  # worker processes of each peer
PGQUEUER_BATCH = 10  # jobs per dequeue: PgQueuer's default
PGQUEUER_DATABASE = "peers_pgqueuer"
CELERY_THREADS = 4  # each Celery worker's thread pool (see celery_peer)
LEAD_SECONDS = 5.0  # from the last enqueue to the first job's due time
ENQUEUE_RATE_FLOOR = 500  # jobs/s for the lead before the first due: time to take them in
POLL_SECONDS = 0.5  # between counts of the recorded starts
READY_TIMEOUT = 60.0  # seconds for a peer's workers or Redis to be ready
RUN_TIMEOUT_FLOOR = 300.0  # seconds a drain or a lateness run may take at least
VERSIONED = ("pgqueuer", "asyncpg", "uvloop", "celery", "kombu", "redis")


@dataclass(frozen=True)
class Peer:
    """How to run one peer: its workers' command, its enqueue command, its readiness."""

    name: str
    env: dict[str, str]
    worker_argv: Callable[[int], list[str]]  # worker n's command
    enqueue_argv: list[str]  # + --jobs N [--first-due T --rate R]
    ready: Callable[[], bool]  # whether all WORKERS workers are ready for jobs


def run_peers(context) -> dict:
    root = _run_dir(context)
    python = peers_venv(root)
    versions = installed_versions(python, VERSIONED)
    drain_jobs = QUICK_DRAIN_JOBS if context.quick else DRAIN_JOBS
    rows = [{"system": "jobsvc", "drain": _ours_drain(context, drain_jobs)}]
    lateness = run_lateness(context)  # dispatch_lateness: the same run as that scenario
    rows[0]["lateness"] = _ours_lateness(lateness)
    due_jobs, due_seconds = lateness["jobs"], lateness["due_over_seconds"]
    with _pgqueuer_database() as dsn:
        peer = _pgqueuer(python, dsn)
        _run([str(python), "-m", "tools.bench.peers.pgqueuer_peer", "install"], peer.env)
        rows.append(_measure(context, root, peer, drain_jobs, due_jobs, due_seconds))
    with _redis(context, root) as url:
        rows.append(
            _measure(context, root, _celery(python, url), drain_jobs, due_jobs, due_seconds)
        )
    result = {
        "drain_jobs": drain_jobs,
        "due_jobs": due_jobs,
        "due_rate_per_second": PEAK_RATE,
        "due_over_seconds": due_seconds,
        "versions": versions | {"redis-server": _redis_version(), **_postgres_version()},
        "results": rows,
    }
    result["systems"] = systems_summary(rows, result["versions"])
    result["setup"] = _setup_text(result)
    result["markdown"] = peers_markdown(result)
    return result


def _run_dir(context) -> Path:
    """Where the peers' venv and records go: the throwaway stack's directory (deleted
    with it), or the results directory outside ``make bench``."""
    from tools.devstack.stack import TEST_STACK_DIR_ENV

    root = Path(os.environ.get(TEST_STACK_DIR_ENV) or context.out) / "peers"
    root.mkdir(parents=True, exist_ok=True)
    return root


# --- jobsvc ---------------------------------------------------------------------------


def _ours_drain(context, jobs: int) -> dict:
    env = scenario_env(context, "peers-drain")
    with clean_slate((1.0,) * DRAIN_USERS) as users:
        past = timezone.now() - timedelta(minutes=1)
        total = load_spread(users, jobs // DRAIN_USERS, lambda i: past)
        with started_workers(context, env, schedulers=2, executors=2) as workers:
            _wait_until_all_finished(total, workers)
        starts = on_every_shard("SELECT extract(epoch FROM started_at)::float8 FROM jobs")
    return drain_numbers(start for (start,) in starts)


def _ours_lateness(lateness: dict) -> dict:
    started = lateness["started_minus_due"]
    return {
        "jobs": lateness["jobs"],
        "p50_ms": started["p50_ms"],
        "p99_ms": started["p99_ms"],
        "max_ms": started["max_ms"],
        "min_ms": started["min_ms"],
    }


# --- a peer -----------------------------------------------------------------------------


def _measure(
    context, root: Path, peer: Peer, drain_jobs: int, due_jobs: int, due_seconds: float
) -> dict:
    return {
        "system": peer.name,
        "drain": _peer_drain(context, root, peer, drain_jobs),
        "lateness": _peer_lateness(context, root, peer, due_jobs, due_seconds),
    }


def _peer_drain(context, root: Path, peer: Peer, jobs: int) -> dict:
    records = _records_dir(root, f"{peer.name}-drain")
    env = {**peer.env, RECORD_DIR_ENV: str(records)}
    _run([*peer.enqueue_argv, "--jobs", str(jobs)], env)
    with _peer_workers(context, peer, env) as workers:
        _wait_for_starts(records, jobs, workers, timeout=RUN_TIMEOUT_FLOOR + jobs / 500)
    numbers = drain_numbers(start for start, _ in read_starts(records))
    return numbers | {"unstarted": jobs - numbers["jobs"]}


def _peer_lateness(context, root: Path, peer: Peer, jobs: int, seconds: float) -> dict:
    records = _records_dir(root, f"{peer.name}-lateness")
    env = {**peer.env, RECORD_DIR_ENV: str(records)}
    with _peer_workers(context, peer, env) as workers:
        _until(peer.ready, what=f"{peer.name}'s workers are ready", workers=workers)
        first_due = time.time() + LEAD_SECONDS + jobs / ENQUEUE_RATE_FLOOR
        _run(
            [
                *peer.enqueue_argv,
                *("--jobs", str(jobs), "--first-due", f"{first_due:.6f}"),
                *("--rate", str(PEAK_RATE)),
            ],
            env,
        )
        if time.time() > first_due:
            raise RuntimeError(f"enqueueing {peer.name}'s jobs took past the first due time")
        _wait_for_starts(records, jobs, workers, timeout=first_due - time.time() + seconds + 120)
        ended = time.time()
    first_due = float(f"{first_due:.6f}")  # as the enqueue command parsed it
    return censored_lateness(
        ((start, due) for start, due in read_starts(records) if due is not None),
        (first_due + index / PEAK_RATE for index in range(jobs)),
        now=ended,
    )


@contextmanager
def _peer_workers(context, peer: Peer, env: dict[str, str]) -> Iterator[list[WorkerProcess]]:
    workers: list[WorkerProcess] = []
    try:
        for index in range(WORKERS):
            workers.append(
                WorkerProcess(
                    kind=peer.name,
                    name=f"peer-{peer.name}-{index}-{secrets.token_hex(2)}",
                    env=env,
                    log_dir=context.out,
                    argv=peer.worker_argv(index),
                )
            )
        yield workers
    finally:
        for worker in workers:
            worker.stop()


def _wait_for_starts(records: Path, jobs: int, workers, *, timeout: float) -> bool:
    """Whether all ``jobs`` started within the timeout (the numbers say how many did)."""
    return _until(
        lambda: count_starts(records) >= jobs,
        what=f"{jobs:,} jobs started",
        workers=workers,
        timeout=max(timeout, RUN_TIMEOUT_FLOOR),
        or_give_up=True,
    )


def _until(
    predicate: Callable[[], bool],
    *,
    what: str,
    workers=(),
    timeout: float = READY_TIMEOUT,
    or_give_up: bool = False,
) -> bool:
    """Poll until ``predicate``; raise if a worker exits, and at the timeout unless
    ``or_give_up`` (then return False)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        dead = [worker.name for worker in workers if not worker.alive()]
        if dead:
            log = next(worker for worker in workers if not worker.alive()).log()[-3000:]
            raise RuntimeError(f"{', '.join(dead)} exited before {what}:\n{log}")
        if time.monotonic() > deadline:
            if or_give_up:
                return False
            raise RuntimeError(f"not within {timeout:.0f} s: {what}")
        time.sleep(POLL_SECONDS)  # polling files and servers, bounded by the deadline
    return True


def _records_dir(root: Path, name: str) -> Path:
    records = root / name
    shutil.rmtree(records, ignore_errors=True)
    records.mkdir(parents=True)
    return records


def _run(argv: list[str], env: dict[str, str]) -> None:
    completed = subprocess.run(
        argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_FLOOR
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} failed:\n{completed.stderr[-3000:]}")


def _peer_env(python: Path, extra: dict[str, str]) -> dict[str, str]:
    """The environment of a peer's processes: the peers' venv first on PATH, the repo on
    PYTHONPATH (for ``tools.bench.peers``), none of the product's settings."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("JOBSVC_", "DJANGO_"))}
    return {
        **keep,
        "PATH": f"{python.parent}:{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
        "VIRTUAL_ENV": str(python.parent.parent),
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


# --- PgQueuer ---------------------------------------------------------------------------


def _pgqueuer(python: Path, dsn: str) -> Peer:

    def ready() -> bool:  # each worker holds one connection once it runs
        with connections[shard_alias(0)].cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = %s AND backend_type = 'client backend'",
                [PGQUEUER_DATABASE],
            )
            return cursor.fetchone()[0] >= WORKERS

    return Peer(
        name="pgqueuer",
        env=_peer_env(python, {"PEERS_PG_DSN": dsn}),
        worker_argv=lambda index: [
            *(str(python), "-m", "tools.bench.peers.pgqueuer_peer", "work"),
            *("--batch-size", str(PGQUEUER_BATCH)),
        ],
        enqueue_argv=[str(python), "-m", "tools.bench.peers.pgqueuer_peer", "enqueue"],
        ready=ready,
    )


@contextmanager
def _pgqueuer_database() -> Iterator[str]:
    """A database of PgQueuer's own on the server of shard 0; its DSN. Dropped after."""
    alias = shard_alias(0)
    config = settings.DATABASES[alias]
    with connections[alias].cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {PGQUEUER_DATABASE} WITH (FORCE)")
        cursor.execute(f"CREATE DATABASE {PGQUEUER_DATABASE}")
    try:
        yield (
            f"postgresql://{config['USER']}@{config['HOST']}:{config['PORT']}/{PGQUEUER_DATABASE}"
        )
    finally:
        with connections[alias].cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {PGQUEUER_DATABASE} WITH (FORCE)")


def _postgres_version() -> dict[str, str]:
    with connections[shard_alias(0)].cursor() as cursor:
        cursor.execute("SHOW server_version")
        return {"postgresql": cursor.fetchone()[0].split()[0]}


# --- Celery -----------------------------------------------------------------------------


def _celery(python: Path, url: str) -> Peer:
    celery = str(python.parent / "celery")
    env = _peer_env(python, {"PEERS_REDIS_URL": url})

    def ready() -> bool:
        completed = subprocess.run(
            [str(python), "-m", "tools.bench.peers.celery_peer", "ping"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        return completed.returncode == 0 and int(completed.stdout.strip() or 0) >= WORKERS

    return Peer(
        name="celery",
        env=env,
        worker_argv=lambda index: [
            *(celery, "-A", "tools.bench.peers.celery_peer", "worker", "--pool", "threads"),
            *("--concurrency", str(CELERY_THREADS)),
            *("--without-gossip", "--without-mingle", "--without-heartbeat"),
            *("--queues", "peers", "--loglevel", "WARNING", "--hostname", f"peer{index}@%h"),
        ],
        enqueue_argv=[str(python), "-m", "tools.bench.peers.celery_peer", "enqueue"],
        ready=ready,
    )


@contextmanager
def _redis(context, root: Path) -> Iterator[str]:
    """redis-server on a free loopback port, without persistence, while the block runs."""
    server = shutil.which("redis-server")
    if server is None:
        raise RuntimeError("redis-server is not installed: apt-get install redis-server")
    port = free_port()
    data = root / "redis"
    data.mkdir(exist_ok=True)
    process = WorkerProcess(
        kind="redis",
        name="peer-redis",
        env=dict(os.environ),
        log_dir=context.out,
        argv=[
            *(server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data)),
            *("--save", "", "--appendonly", "no"),
        ],
    )
    try:
        _until(lambda: _redis_answers(port), what="redis-server answers", workers=[process])
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.stop()


def _redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _redis_version() -> str:
    output = subprocess.run(
        ["redis-server", "--version"], capture_output=True, text=True, check=True, timeout=10
    ).stdout
    return next((part[2:] for part in output.split() if part.startswith("v=")), output.strip())


# --- the report -------------------------------------------------------------------------


def _setup_text(result: dict) -> str:
    v = result["versions"]
    return (
        f"all on this {os.cpu_count()}-core machine, no-op jobs. "
        f"jobsvc: 2 schedulers and 2 executors, {len(shard_ids())} shards on 2 PostgreSQL "
        f"{v['postgresql']} servers, Apache Kafka, ZooKeeper; the backlog COPY-loaded into "
        "the shards, the timed jobs created through the API (dispatch_lateness). "
        f"PgQueuer {v['pgqueuer']} (asyncpg {v['asyncpg']}, uvloop {v['uvloop']}): "
        f"{WORKERS} worker processes running PgQueuer.run (as `pgq run` does) on uvloop, "
        f"batch size {PGQUEUER_BATCH}, an async no-op "
        "entrypoint, durable tables in a database of its own on the bench's first PostgreSQL "
        f"server; jobs enqueued in batches of 1,000, timed ones with execute_after. "
        f"Celery {v['celery']} (kombu {v['kombu']}, redis-py {v['redis']}) on Redis "
        f"{v['redis-server']} without persistence: {WORKERS} worker processes with "
        f"{CELERY_THREADS} threads each, "
        "prefetch multiplier 100, results ignored, no gossip, mingle or heartbeat; tasks "
        "sent one apply_async call each, timed ones as ETA tasks. "
        f"Drain: {result['drain_jobs']:,} jobs due before the workers start, jobs over "
        f"first start to last start. Lateness: {result['due_jobs']:,} jobs due at "
        f"{result['due_rate_per_second']:,}/s for {result['due_over_seconds']} s, all "
        f"created before the first is due (the peers' at least 1 s per "
        f"{ENQUEUE_RATE_FLOOR} jobs ahead of it, with their workers running), start - due"
    )


def systems_summary(rows: list[dict], versions: dict[str, str]) -> dict[str, dict]:
    """The figures docs/benchmarks.md shows, by system: the peers' versions, the drain rate
    and the lateness p50 and p99."""
    return {
        row["system"]: {
            "version": versions.get(row["system"]),
            "drain_jobs_per_second": row["drain"]["jobs_per_second"],
            "lateness_ms": {"p50": row["lateness"]["p50_ms"], "p99": row["lateness"]["p99_ms"]},
        }
        for row in rows
    }


def _cell(value, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def peers_markdown(result: dict) -> str:
    lines = [
        "| system | drain jobs/s | lateness p50 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|",
    ]
    notes = []
    for row in result["results"]:
        drain, late = row["drain"], row["lateness"]
        at_least = "≥ " if late.get("unstarted") else ""
        lines.append(
            f"| {row['system']} | {_cell(drain['jobs_per_second'])} | "
            f"{at_least}{_cell(late['p50_ms'], 1)} | {at_least}{_cell(late['p99_ms'], 1)} | "
            f"{at_least}{_cell(late['max_ms'], 1)} |"
        )
        if drain.get("unstarted"):
            notes.append(
                f"{row['system']}: {drain['unstarted']:,} of the drain's jobs had not started "
                "when the wait ran out; the rate is that of those that had."
            )
        if late.get("unstarted"):
            notes.append(
                f"{row['system']}: {late['unstarted']:,} of the timed jobs had not started "
                "when the wait ran out; each counted as starting then, so its lateness "
                "figures are lower bounds."
            )
    lines += ["", *notes, f"Setup: {result['setup']}."]
    return "\n".join(lines)
