"""Run an executor worker: ``python manage.py run_executor [--worker-id ID]``.

Besides its work, the executor registers in ZooKeeper (``coordination.executors``) so the
admin's cluster page can name it with its partitions. That is in the background and never
waits: without ZooKeeper the executor runs its jobs, and registers once it connects.
"""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from coordination.client import connect_in_background, disconnect
from coordination.executors import ExecutorRegistration
from executor_worker.runner import AttemptRunner
from executor_worker.worker import ExecutorConfig, ExecutorWorker
from jobsvc.handlers.errors import HandlerConfigError
from jobsvc.handlers.setup import registry_from_settings
from jobsvc.messaging.renewing_producer import RenewingProducer
from jobsvc.worker_process import add_worker_id_argument, prepare_worker_process, run_worker
from jobsvc.zookeeper import zookeeper_auth


class Command(BaseCommand):
    help = "Run an executor worker (one member of the executors' consumer group)."

    def add_arguments(self, parser) -> None:
        add_worker_id_argument(parser)
        parser.add_argument("--concurrency", type=int, default=settings.EXECUTOR_CONCURRENCY)

    def handle(self, *args, **options) -> None:
        if settings.RETRY_MAX_DELAY < settings.RETRY_BASE_DELAY:
            raise CommandError("JOBSVC_RETRY_MAX_DELAY_SECONDS is below the base delay")
        worker_id = options["worker_id"]
        prepare_worker_process(worker_id)
        # Dead letters, and the kafka handler's messages.
        producer = RenewingProducer.publishing_within(
            settings.EXECUTOR_PUBLISH_TIMEOUT,
            bootstrap=settings.KAFKA_BOOTSTRAP,
            client_id=f"executor-{worker_id}",
        )
        try:
            registry = registry_from_settings(producer=producer)
        except HandlerConfigError as exc:
            raise CommandError(f"handler configuration: {exc}") from exc
        zookeeper = connect_in_background(
            settings.ZK_HOSTS, session_timeout=settings.ZK_SESSION_TIMEOUT, auth=zookeeper_auth()
        )
        registration = ExecutorRegistration(zookeeper, worker_id=worker_id, root=settings.ZK_ROOT)
        worker = ExecutorWorker(
            worker_id=worker_id,
            bootstrap=settings.KAFKA_BOOTSTRAP,
            config=_config(concurrency=options["concurrency"]),
            runner=AttemptRunner(
                registry=registry,
                retry_base_delay=settings.RETRY_BASE_DELAY,
                retry_max_delay=settings.RETRY_MAX_DELAY,
                response_excerpt_bytes=settings.ATTEMPT_RESPONSE_EXCERPT_BYTES,
            ),
            producer=producer,
            on_partitions_changed=registration.partitions_changed,
            peers=registration,
        )
        registration.start()
        try:  # on return, the group has taken its partitions back
            run_worker(worker, metrics_port=settings.EXECUTOR_METRICS_PORT)
        finally:
            # Leave the cluster page after the consumer group: delete the node, then end
            # the session (which would take the node with it anyway).
            registration.stop()
            disconnect(zookeeper)


def _config(*, concurrency: int) -> ExecutorConfig:
    return ExecutorConfig(
        topic=settings.KAFKA_JOBS_TOPIC,
        dead_letter_topic=settings.KAFKA_DEAD_LETTER_TOPIC,
        group_id=settings.EXECUTOR_GROUP_ID,
        batch_size=settings.EXECUTOR_BATCH_SIZE,
        concurrency=concurrency,
        max_in_flight=settings.EXECUTOR_MAX_IN_FLIGHT,
        read_ahead=settings.EXECUTOR_READ_AHEAD,
        claim_batch=settings.EXECUTOR_CLAIM_BATCH,
        max_uncommitted=settings.EXECUTOR_MAX_UNCOMMITTED_PER_PARTITION,
        lease_seconds=settings.EXECUTOR_LEASE_SECONDS,
        max_clock_offset=settings.EXECUTOR_MAX_CLOCK_OFFSET,
        step_back_after=settings.EXECUTOR_STEP_BACK_AFTER,
        step_back_seconds=settings.EXECUTOR_STEP_BACK,
        drain_timeout=settings.EXECUTOR_DRAIN_TIMEOUT,
        publish_timeout=settings.EXECUTOR_PUBLISH_TIMEOUT,
        idle_transaction_limit=settings.DB_IDLE_IN_TRANSACTION_TIMEOUT,
        unhealthy_after=settings.EXECUTOR_UNHEALTHY_AFTER,
    )
