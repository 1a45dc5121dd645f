"""The Apache Kafka broker of the local stack: one node in KRaft mode, broker and controller.

The jars come from Maven Central through `kafka.pom.xml` (see `kafka_jars`) and run under
`java -cp`, as Kafka's own `kafka-server-start.sh` would run them. Files under `root`:

    server.properties   rewritten on every start (a resumed stack may move to other ports)
    data/               the log dirs: topics, offsets and the metadata log, kept across
                        restarts, so a message acknowledged before a restart is there after

The log dirs are formatted (`kafka.tools.StorageTool format`) once, on the first start.
The broker is ready only when a message produced to a topic of its own comes back to a
consumer: answering on its port is not enough (the metadata log may still be loading,
and the group coordinator may not be elected).
"""

from __future__ import annotations

import base64
import logging
import subprocess
import time
import uuid
from typing import ClassVar

from .errors import ServerStartError
from .java import java, native_heap_trim
from .kafka_jars import classpath
from .ports import free_port
from .server import Server

logger = logging.getLogger(__name__)

# -Xms and -Xmx (fixed, as Kafka's kafka-server-start.sh does): a development broker holds
# a few topics of a few million messages. The heap is touched at start, so the process's
# memory does not creep up as the collector grows the heap; native memory freed is
# trimmed (``native_heap_trim``).
HEAP_MB = 512
NODE_ID = 1
READINESS_TOPIC = "localstack.readiness"  # produced to and read back by the readiness probe
PROBE_TIMEOUT = 5.0  # seconds one readiness round trip may take
FORMAT_TIMEOUT = 60.0  # seconds `StorageTool format` may take (a JVM start)
JVM_OPTIONS = (
    # Kafka's own defaults (kafka-run-class.sh): G1 with short pauses.
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    "-Djava.net.preferIPv4Stack=true",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSZ",
)
# Settings of a one-node cluster. Internal topics cannot have more replicas than brokers.
SINGLE_NODE_SETTINGS = {
    "offsets.topic.replication.factor": 1,
    "offsets.topic.num.partitions": 10,  # default 50: slow to create on a 2-core machine
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "share.coordinator.state.topic.replication.factor": 1,
    "share.coordinator.state.topic.min.isr": 1,
    "default.replication.factor": 1,
    "min.insync.replicas": 1,
    # A group's first member is given its partitions at once, not after 3 s.
    "group.initial.rebalance.delay.ms": 0,
    # Topics exist only when `manage.py ensure_topics` creates them, as in production.
    "auto.create.topics.enable": "false",
    "unclean.leader.election.enable": "false",
    # A week of messages, or 1 GiB per partition, whichever comes first.
    "log.retention.hours": 168,
    "log.retention.bytes": 1024**3,
    "log.segment.bytes": 128 * 1024**2,
    "num.network.threads": 2,
    "num.io.threads": 4,
}


class KafkaBroker(Server):
    """One Apache Kafka node on 127.0.0.1: clients on `port`, its controller on
    `controller_port`."""

    kind: ClassVar[str] = "kafka"
    ready_timeout: ClassVar[float] = 90.0  # a restart replays the logs first

    def __init__(self, *, controller_port: int | None = None, **kwargs) -> None:
        """``controller_port``: None picks a free one."""
        super().__init__(**kwargs)
        self.controller_port = controller_port if controller_port is not None else free_port()
        self.data_dir = self.root / "data"
        self.config_path = self.root / "server.properties"

    @property
    def bootstrap(self) -> str:
        """The bootstrap servers string clients use (`JOBSVC_KAFKA_BOOTSTRAP`)."""
        return self.address

    def _prepare(self) -> None:
        controller = f"{self.host}:{self.controller_port}"
        settings = {
            "process.roles": "broker,controller",
            "node.id": NODE_ID,
            "controller.quorum.voters": f"{NODE_ID}@{controller}",
            "listeners": f"PLAINTEXT://{self.address},CONTROLLER://{controller}",
            "advertised.listeners": f"PLAINTEXT://{self.address}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": self.data_dir,
            **SINGLE_NODE_SETTINGS,
        }
        self.config_path.write_text(
            "# Written by tools/devstack on every start; edits are lost.\n"
            + "".join(f"{key}={value}\n" for key, value in settings.items())
        )
        if not (self.data_dir / "meta.properties").exists():
            self._format()

    def _format(self) -> None:
        """Format the log dirs of a new broker (KRaft needs a cluster id written first)."""
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        argv = [
            java(),
            "-cp",
            classpath(),
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={cluster_id}",  # an id may begin with "-"
            "--config",
            str(self.config_path),
        ]
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=FORMAT_TIMEOUT, check=False
        )
        if result.returncode != 0:
            raise ServerStartError(
                f"formatting {self.data_dir} failed:\n{(result.stdout + result.stderr)[-3000:]}"
            )
        logger.info("%s: formatted %s (cluster %s)", self.name, self.data_dir, cluster_id)

    def _argv(self) -> list[str]:
        return [
            java(),
            f"-Xms{HEAP_MB}m",
            f"-Xmx{HEAP_MB}m",
            "-XX:+AlwaysPreTouch",
            *native_heap_trim(),
            *JVM_OPTIONS,
            "-cp",
            classpath(),
            "kafka.Kafka",
            str(self.config_path),
        ]

    def _is_ready(self) -> bool:
        return produce_and_consume(self.bootstrap, timeout=PROBE_TIMEOUT)


def produce_and_consume(bootstrap: str, *, timeout: float) -> bool:
    """True if a message produced to `READINESS_TOPIC` (created if missing) is read back."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    quiet = {"bootstrap.servers": bootstrap, "log_level": 0, "socket.timeout.ms": 2000}
    deadline = time.monotonic() + timeout
    try:
        admin = AdminClient(quiet)
        if READINESS_TOPIC not in admin.list_topics(timeout=timeout).topics:
            futures = admin.create_topics([NewTopic(READINESS_TOPIC, 1, 1)])
            futures[READINESS_TOPIC].result(timeout=timeout)
        token = uuid.uuid4().bytes
        producer = Producer({**quiet, "acks": "all", "message.timeout.ms": int(timeout * 1000)})
        delivered: list[int] = []
        producer.produce(
            READINESS_TOPIC,
            value=token,
            on_delivery=lambda err, msg: err is None and delivered.append(msg.offset()),
        )
        producer.flush(timeout)
        if not delivered:
            return False
        consumer = Consumer(
            {**quiet, "group.id": "localstack-readiness", "enable.auto.commit": False}
        )
        try:
            consumer.assign([TopicPartition(READINESS_TOPIC, 0, delivered[0])])
            while time.monotonic() < deadline:
                message = consumer.poll(0.2)
                if message is not None and message.error() is None and message.value() == token:
                    return True
        finally:
            consumer.close()
    except (KafkaException, OSError):
        return False
    return False
