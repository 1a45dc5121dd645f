"""Run a scheduler worker: ``python manage.py run_scheduler [--worker-id ID]``."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand

from jobsvc.sharding.shards import shard_ids
from jobsvc.worker_process import add_worker_id_argument, prepare_worker_process, run_worker
from jobsvc.zookeeper import zookeeper_auth
from scheduler_worker.dispatch_config import DispatchConfig
from scheduler_worker.worker import SchedulerWorker


class Command(BaseCommand):
    help = "Run a scheduler worker until SIGTERM or SIGINT."

    def add_arguments(self, parser) -> None:
        add_worker_id_argument(parser)
        parser.add_argument(
            "--max-in-flight", type=int, default=settings.SCHEDULER_MAX_IN_FLIGHT_PER_SHARD
        )
        parser.add_argument(
            "--in-flight-seconds", type=float, default=settings.SCHEDULER_IN_FLIGHT_SECONDS
        )

    def handle(self, *args, **options) -> None:
        prepare_worker_process(options["worker_id"])
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
                in_flight_seconds=options["in_flight_seconds"],
                sweep_interval=settings.SCHEDULER_SWEEP_INTERVAL,
                publish_timeout=settings.SCHEDULER_PUBLISH_TIMEOUT,
            ),
            weight_refresh_seconds=settings.SCHEDULER_WEIGHT_REFRESH,
            unhealthy_after=settings.SCHEDULER_UNHEALTHY_AFTER,
            step_back_after=settings.SCHEDULER_STEP_BACK_AFTER,
            step_back_seconds=settings.SCHEDULER_STEP_BACK,
        )
        run_worker(worker, metrics_port=settings.SCHEDULER_METRICS_PORT)
