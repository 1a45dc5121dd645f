"""What both workers' management commands (``run_scheduler``, ``run_executor``) do around
their worker: name it, set its process up, serve its endpoint and stop it on a signal."""

from __future__ import annotations

import os
import signal
import socket
from typing import Protocol

from django.conf import settings
from django.core.management.base import CommandError

from jobsvc.gc_tuning import tune_garbage_collector
from jobsvc.logs import WORKER_ID_ENV
from jobsvc.messaging.topics import TopicsTooWeak, require_durable_topics
from jobsvc.worker_endpoint import serve_worker_endpoint


class Worker(Protocol):
    def run(self) -> None: ...
    def stop(self) -> None: ...
    def readiness(self) -> list[str]: ...


def add_worker_id_argument(parser) -> None:
    parser.add_argument(
        "--worker-id",
        default=os.environ.get("JOBSVC_WORKER_ID") or f"{socket.gethostname()}-{os.getpid()}",
        help="unique name of this worker in logs, ZooKeeper and Kafka client ids "
        "(default: host-pid)",
    )


def prepare_worker_process(worker_id: str) -> None:
    """Stamp ``worker_id`` on every log record, tune the garbage collector, and refuse to
    run on Kafka topics weaker than configured."""
    os.environ[WORKER_ID_ENV] = worker_id
    tune_garbage_collector(settings.GC_YOUNG_THRESHOLD)
    try:
        require_durable_topics(bootstrap=settings.KAFKA_BOOTSTRAP)
    except TopicsTooWeak as exc:
        raise CommandError(f"Kafka topics weaker than configured: {exc}") from exc


def run_worker(worker: Worker, *, metrics_port: int) -> None:
    """Serve the worker's ``/metrics`` and health on ``metrics_port`` (0: none), stop it
    on SIGTERM or SIGINT, and run it until it has stopped."""
    if metrics_port:
        serve_worker_endpoint(
            port=metrics_port, readiness=worker.readiness, address=settings.WORKER_METRICS_BIND
        )
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: worker.stop())
    worker.run()
