"""PgQueuer's side of the peers benchmark; runs in the peers' venv (``venv.py``).

Its documented fast path: the asyncpg driver, uvloop, an async no-op entrypoint, durable
tables (the default) on the bench stack's PostgreSQL. Each worker process runs
``PgQueuer.run`` (what ``pgq run`` runs; the ``pgq`` command itself fails in 1.6.0 with
the pinned typer, before it loads a factory)::

    python -m tools.bench.peers.pgqueuer_peer work --batch-size 10

and the jobs are enqueued in batches through ``Queries.enqueue``; a job due later gets
``execute_after`` (a delay from the insert)::

    python -m tools.bench.peers.pgqueuer_peer enqueue --jobs N [--first-due T --rate R]

The database comes from ``$PEERS_PG_DSN``; each started job is recorded by ``records``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from datetime import timedelta

import asyncpg
import uvloop
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries

from tools.bench.peers.records import StartLog

DSN_ENV = "PEERS_PG_DSN"
ENTRYPOINT = "noop"
ENQUEUE_BATCH = 1000  # jobs per enqueue call


async def create_pgqueuer() -> PgQueuer:
    """One connection, one no-op entrypoint that records its start."""
    connection = await asyncpg.connect(dsn=os.environ[DSN_ENV])
    pgq = PgQueuer(AsyncpgDriver(connection))
    log = StartLog.from_env()

    @pgq.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        log.record(float(job.payload) if job.payload else None)

    return pgq


async def work(*, batch_size: int) -> None:
    """Run jobs until SIGTERM or SIGINT, then shut down as ``pgq run`` does."""
    pgq = await create_pgqueuer()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, pgq.shutdown.set)
    await pgq.run(batch_size=batch_size)


async def enqueue(*, jobs: int, first_due: float | None, rate: float) -> None:
    """``jobs`` no-op jobs: due now, or job ``i`` due at ``first_due + i / rate``."""
    connection = await asyncpg.connect(dsn=os.environ[DSN_ENV])
    queries = Queries(AsyncpgDriver(connection))
    try:
        for start in range(0, jobs, ENQUEUE_BATCH):
            count = min(ENQUEUE_BATCH, jobs - start)
            if first_due is None:
                await queries.enqueue([ENTRYPOINT] * count, [b""] * count, [0] * count)
                continue
            dues = [first_due + index / rate for index in range(start, start + count)]
            now = time.time()
            await queries.enqueue(
                [ENTRYPOINT] * count,
                [f"{due:.6f}".encode() for due in dues],
                [0] * count,
                execute_after=[timedelta(seconds=max(0.0, due - now)) for due in dues],
            )
    finally:
        await connection.close()


async def install() -> None:
    """PgQueuer's tables, as ``pgq install`` creates them."""
    connection = await asyncpg.connect(dsn=os.environ[DSN_ENV])
    try:
        await Queries(AsyncpgDriver(connection)).install()
    finally:
        await connection.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.peers.pgqueuer_peer")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("install")
    worker = commands.add_parser("work")
    worker.add_argument("--batch-size", type=int, default=10, help="jobs per dequeue")
    add = commands.add_parser("enqueue")
    add.add_argument("--jobs", type=int, required=True)
    add.add_argument("--first-due", type=float, help="Unix time the first job is due")
    add.add_argument("--rate", type=float, default=1.0, help="jobs due per second after it")
    args = parser.parse_args(argv)
    if args.command == "install":
        asyncio.run(install())
    elif args.command == "work":
        uvloop.run(work(batch_size=args.batch_size))
    else:
        asyncio.run(enqueue(jobs=args.jobs, first_due=args.first_due, rate=args.rate))
    return 0


if __name__ == "__main__":
    sys.exit(main())
