"""The cluster page's executors: Kafka's consumer group, cross-checked with ZooKeeper.

The broker describes the executors' consumer group: its members, the partitions each was
assigned, and each partition's lag. Executors also register in ZooKeeper with the
partitions their consumer was assigned (``coordination.executors``), which shows an
executor the group does not know (not joined yet, or cut off from the broker), and the
host and pid of each. Either may be unavailable.

Joined by worker id: a member's Kafka client id is ``executor-<worker_id>``
(``ExecutorWorker.run``). Where the broker names a member, its assignment is used (it is
the group's own, and the registration may trail it by a round trip); a member only one
side knows is still listed.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordination.executors import ExecutorRecord
from jobsvc.messaging.consumer_group import ConsumerGroupView

KAFKA_CLIENT_ID_PREFIX = "executor-"  # the executor's consumer client.id is this + its id


@dataclass(frozen=True)
class ExecutorRow:
    worker_id: str
    host: str | None
    pid: int | None
    started: str | None
    partitions: list[int]  # sorted
    lag: int | None  # messages behind on its partitions; None: Kafka unavailable
    in_zookeeper: bool
    in_kafka: bool

    @property
    def seen_by(self) -> str:
        return ", ".join(
            name
            for name, seen in (("ZooKeeper", self.in_zookeeper), ("Kafka", self.in_kafka))
            if seen
        )


def executor_rows(
    *, registered: list[ExecutorRecord] | None, group: ConsumerGroupView | None
) -> list[ExecutorRow]:
    """Every executor either side knows, sorted by worker id; None: that side unavailable."""
    rows: dict[str, dict] = {
        record.worker_id: {
            "worker_id": record.worker_id,
            "host": record.host,
            "pid": record.pid,
            "started": record.started,
            "partitions": list(record.partitions),
            "in_zookeeper": True,
            "in_kafka": False,
        }
        for record in registered or []
    }
    for member in group.members if group else []:
        worker_id = member.client_id.removeprefix(KAFKA_CLIENT_ID_PREFIX) or member.client_id
        row = rows.setdefault(
            worker_id,
            {
                "worker_id": worker_id,
                "host": member.host,
                "pid": None,
                "started": None,
                "in_zookeeper": False,
            },
        )
        row["partitions"] = list(member.partitions)
        row["in_kafka"] = True
    lags = {partition.partition: partition.lag for partition in group.partitions} if group else {}
    return [
        ExecutorRow(
            **{**row, "partitions": sorted(row["partitions"])},
            lag=sum(lags.get(p, 0) for p in row["partitions"]) if group else None,
        )
        for _, row in sorted(rows.items())
    ]


def partition_holders(rows: list[ExecutorRow]) -> dict[int, str]:
    """Which executor holds each partition, as the rows say."""
    return {partition: row.worker_id for row in rows for partition in row.partitions}
