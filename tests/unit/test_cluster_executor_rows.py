"""The cluster page's executors: ZooKeeper's registrations joined with Kafka's group."""

from __future__ import annotations

from coordination.executors import ExecutorRecord
from jobsvc.cluster.executors import executor_rows, partition_holders
from jobsvc.messaging.consumer_group import ConsumerGroupView, GroupMember, PartitionLag


def record(worker_id: str, partitions: list[int]) -> ExecutorRecord:
    return ExecutorRecord(
        worker_id=worker_id,
        host="box",
        pid=7,
        started="2024-01-01T00:00:00+00:00",
        partitions=partitions,
    )


def group(members: list[GroupMember], lags: dict[int, int]) -> ConsumerGroupView:
    return ConsumerGroupView(
        state="stable",
        members=members,
        partitions=[PartitionLag(p, 0, lag, lag) for p, lag in sorted(lags.items())],
    )


def test_registered_executors_get_the_lag_of_their_partitions_when_the_broker_names_none():
    rows = executor_rows(
        registered=[record("b", [2, 3]), record("a", [1, 0])],
        group=group([], {0: 5, 1: 0, 2: 1, 3: 2}),
    )

    assert [(r.worker_id, r.partitions, r.lag, r.seen_by) for r in rows] == [
        ("a", [0, 1], 5, "ZooKeeper"),
        ("b", [2, 3], 3, "ZooKeeper"),
    ]
    assert partition_holders(rows) == {0: "a", 1: "a", 2: "b", 3: "b"}


def test_a_member_the_broker_names_is_joined_by_worker_id_with_the_brokers_assignment():
    rows = executor_rows(
        registered=[record("a", [0])],
        group=group(
            [GroupMember("executor-a", "/10.0.0.1", [0, 1]), GroupMember("executor-c", "/h", [2])],
            {0: 1, 1: 1, 2: 4},
        ),
    )

    assert [(r.worker_id, r.host, r.partitions, r.lag, r.seen_by) for r in rows] == [
        ("a", "box", [0, 1], 2, "ZooKeeper, Kafka"),
        ("c", "/h", [2], 4, "Kafka"),
    ]


def test_without_kafka_the_registrations_are_listed_with_no_lag():
    rows = executor_rows(registered=[record("a", [0])], group=None)

    assert [(r.worker_id, r.partitions, r.lag) for r in rows] == [("a", [0], None)]


def test_without_either_side_there_are_no_rows():
    assert executor_rows(registered=None, group=None) == []


def test_a_registration_is_read_leniently():
    assert ExecutorRecord.decode("a", b"not json") == ExecutorRecord("a", None, None, None, [])
    decoded = ExecutorRecord.decode(
        "a", b'{"worker_id": "x", "host": 3, "pid": 9, "partitions": [2, "1", 0]}'
    )
    assert decoded == ExecutorRecord("a", None, 9, None, [0, 2])
    assert ExecutorRecord.decode("a", record("a", [1]).encode()) == record("a", [1])
