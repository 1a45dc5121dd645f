"""Celery's side of the peers benchmark; runs in the peers' venv (``venv.py``).

The Celery app, with Redis (``$PEERS_REDIS_URL``) as broker and its documented settings
for many short tasks: no result backend (results ignored), a high prefetch multiplier,
JSON. A job due later is an ETA task. The worker processes are started as users start
them, each with a pool of threads: for no-op tasks and ETA tasks the fastest of Celery's
pools on this machine (prefork and solo started ETA tasks seconds late)::

    celery -A tools.bench.peers.celery_peer worker --pool threads --concurrency 4 \\
        --without-gossip --without-mingle --without-heartbeat -Q peers

and the jobs are sent with ``apply_async`` over one producer connection::

    python -m tools.bench.peers.celery_peer enqueue --jobs N [--first-due T --rate R]
    python -m tools.bench.peers.celery_peer ping     # prints how many workers answer

Each started job is recorded by ``records``.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from celery import Celery

from tools.bench.peers.records import RECORD_DIR_ENV, StartLog

QUEUE = "peers"
PREFETCH_MULTIPLIER = 100  # Celery's advice for many short tasks: fetch more at a time
PING_SECONDS = 1.0  # how long a ping waits for the workers' answers

app = Celery("peers", broker=os.environ.get("PEERS_REDIS_URL", "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_ignore_result=True,
    result_backend=None,
    task_default_queue=QUEUE,
    task_serializer="json",
    accept_content=["json"],
    worker_prefetch_multiplier=PREFETCH_MULTIPLIER,
    worker_send_task_events=False,
    broker_connection_retry_on_startup=True,
    enable_utc=True,
)
_log = StartLog(Path(os.environ.get(RECORD_DIR_ENV, ".")))  # opens on the first task


@app.task(name="noop", ignore_result=True)
def noop(due: float | None = None) -> None:
    _log.record(due)


def enqueue(*, jobs: int, first_due: float | None, rate: float) -> None:
    """``jobs`` no-op tasks: due now, or task ``i`` an ETA task due ``first_due + i / rate``."""
    with app.producer_or_acquire() as producer:
        for index in range(jobs):
            if first_due is None:
                noop.apply_async(producer=producer)
                continue
            due = first_due + index / rate
            noop.apply_async(
                kwargs={"due": due}, eta=datetime.fromtimestamp(due, UTC), producer=producer
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.peers.celery_peer")
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("enqueue")
    add.add_argument("--jobs", type=int, required=True)
    add.add_argument("--first-due", type=float, help="Unix time the first job is due")
    add.add_argument("--rate", type=float, default=1.0, help="jobs due per second after it")
    commands.add_parser("ping")
    args = parser.parse_args(argv)
    if args.command == "ping":
        print(len(app.control.ping(timeout=PING_SECONDS)))
    else:
        enqueue(jobs=args.jobs, first_due=args.first_due, rate=args.rate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
