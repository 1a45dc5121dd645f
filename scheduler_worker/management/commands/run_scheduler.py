"""Run a scheduler worker: ``python manage.py run_scheduler [--worker-id ID]``."""

from __future__ import annotations

import logging
import os
import signal
import socket

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from jobsvc.gc_tuning import tune_garbage_collector
from jobsvc.logs import WORKER_ID_ENV
from jobsvc.messaging.topics import TopicsTooWeak, require_durable_topics
from jobsvc.sharding.shards import shard_ids
from jobsvc.worker_endpoint import serve_worker_endpoint
from jobsvc.zookeeper import zookeeper_auth
from scheduler_worker.dispatch_config import DispatchConfig
from scheduler_worker.worker import SchedulerWorker

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Run a scheduler worker until SIGTERM or SIGINT."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--worker-id",
            default=os.environ.get("JOBSVC_WORKER_ID") or f"{socket.gethostname()}-{os.getpid()}",
            help="unique name of this worker in ZooKeeper (default: host-pid)",
        )
        parser.add_argument(
            "--max-in-flight", type=int, default=settings.SCHEDULER_MAX_IN_FLIGHT_PER_SHARD
        )

    def handle(self, *args, **options) -> None:
        os.environ[WORKER_ID_ENV] = options["worker_id"]  # stamped on every log record
        tune_garbage_collector(settings.GC_YOUNG_THRESHOLD)
        try:
            require_durable_topics(bootstrap=settings.KAFKA_BOOTSTRAP)
        except TopicsTooWeak as exc:
            raise CommandError(f"Kafka topics weaker than configured: {exc}") from exc
        worker = SchedulerWorker(
            worker_id=options["worker_id"],
            shard_ids=list(shard_ids()),
            zk_hosts=settings.ZK_HOSTS,
            zk_auth=zookeeper_auth(),
            zk_root=settings.ZK_ROOT,
            zk_session_timeout=settings.ZK_SESSION_TIMEOUT,
            kafka_bootstrap=settings.KAFKA_BOOTSTRAP,
            dispatch=DispatchConfig(
                topic=settings.KAFKA_JOBS_TOPIC,
                dead_letter_topic=settings.KAFKA_DEAD_LETTER_TOPIC,
                max_in_flight=options["max_in_flight"],
                poll_interval=settings.SCHEDULER_POLL_INTERVAL,
                queued_timeout=settings.SCHEDULER_QUEUED_TIMEOUT,
                dispatch_ahead=settings.SCHEDULER_DISPATCH_AHEAD,
                sweep_interval=settings.SCHEDULER_SWEEP_INTERVAL,
                publish_timeout=settings.SCHEDULER_PUBLISH_TIMEOUT,
            ),
            weight_refresh_seconds=settings.SCHEDULER_WEIGHT_REFRESH,
            unhealthy_after=settings.SCHEDULER_UNHEALTHY_AFTER,
            step_back_after=settings.SCHEDULER_STEP_BACK_AFTER,
            step_back_seconds=settings.SCHEDULER_STEP_BACK,
        )
        if settings.SCHEDULER_METRICS_PORT:
            serve_worker_endpoint(
                port=settings.SCHEDULER_METRICS_PORT,
                readiness=worker.readiness,
                address=settings.WORKER_METRICS_BIND,
            )
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: worker.stop())
        worker.run()
