"""ExecutorRegistration against the real ZooKeeper: the node is there while the executor
runs, says what it holds, goes when it stops or dies, and comes back after an outage.

Connection faults go through a FaultProxy in front of the test ZooKeeper.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from coordination import ZnodePaths
from coordination.client import connect_in_background, disconnect
from coordination.cluster import cluster_membership
from coordination.executors import ExecutorRegistration
from tests.waiting import wait_until

from .conftest import SESSION_TIMEOUT, STOP_TIMEOUT
from .test_connection_loss import EXPIRY_TIMEOUT, RECONNECT_TIMEOUT

SETTLE_TIMEOUT = 10.0  # seconds for a write to reach ZooKeeper


@pytest.fixture
def make_registration(zk_root, observer) -> Iterator[Callable[..., ExecutorRegistration]]:
    """Start registrations under the test's root; stop them and delete the root afterwards."""
    started: list[ExecutorRegistration] = []

    def make(worker_id: str, client: KazooClient) -> ExecutorRegistration:
        registration = ExecutorRegistration(client, worker_id=worker_id, root=zk_root)
        registration.start()
        started.append(registration)
        return registration

    yield make
    # Past ExecutorRegistration's own 5 s: a fault proxy goes before this fixture, and a
    # request in flight then waits out the client's connection retries (about 5 s).
    stopped = [registration.stop(timeout=STOP_TIMEOUT) for registration in started]
    with contextlib.suppress(KazooException):
        observer.delete(zk_root, recursive=True)
    assert all(stopped), "an ExecutorRegistration did not stop in time"


def node(observer: KazooClient, zk_root: str, worker_id: str) -> dict | None:
    """The executor's node, or None; one read, since an expiring session can delete it any time."""
    try:
        raw, _ = observer.get(ZnodePaths(zk_root).executor(worker_id))
    except NoNodeError:
        return None
    return json.loads(raw)


def test_a_started_executor_registers_an_ephemeral_node_with_who_it_is(
    make_registration, make_client, observer, zk_root, zk_hosts
):
    client = make_client()
    registration = make_registration("executor-1", client)
    registration.partitions_changed(frozenset({3, 1}))

    wait_until(
        lambda: (node(observer, zk_root, "executor-1") or {}).get("partitions") == [1, 3],
        timeout=SETTLE_TIMEOUT,
        what="the node holds the partitions",
    )
    data = node(observer, zk_root, "executor-1")
    stat = observer.exists(registration.path)

    assert stat.ephemeralOwner == client.client_id[0]
    assert data["worker_id"] == "executor-1"
    assert isinstance(data["host"], str) and data["host"]
    assert isinstance(data["pid"], int)
    assert data["started"]
    membership = cluster_membership(
        hosts=zk_hosts, root=zk_root, shard_ids=[], timeout=SESSION_TIMEOUT
    )
    assert [(r.worker_id, r.partitions) for r in membership.executors] == [("executor-1", [1, 3])]


def test_every_rebalance_rewrites_the_partitions(make_registration, make_client, observer, zk_root):
    registration = make_registration("executor-1", make_client())
    for partitions in ([0, 1, 2, 3], [2, 3], []):
        registration.partitions_changed(partitions)
        wait_until(
            lambda expected=partitions: (
                (node(observer, zk_root, "executor-1") or {}).get("partitions") == expected
            ),
            timeout=SETTLE_TIMEOUT,
            what=f"the node says {partitions}",
        )


def test_a_stopped_executor_deletes_its_node(make_registration, make_client, observer, zk_root):
    registration = make_registration("executor-1", make_client())
    wait_until(registration.registered, timeout=SETTLE_TIMEOUT, what="registered")

    assert registration.stop()
    assert node(observer, zk_root, "executor-1") is None


def test_a_killed_executors_node_goes_with_its_session(
    make_registration, make_client, observer, zk_root
):
    client = make_client()
    registration = make_registration("executor-1", client)
    wait_until(registration.registered, timeout=SETTLE_TIMEOUT, what="registered")

    disconnect(client)  # the session ends without the registration's stop()

    assert node(observer, zk_root, "executor-1") is None


def test_after_its_session_expired_the_node_is_created_again_with_the_latest_partitions(
    make_registration, make_client, observer, zk_root, fault_proxy
):
    client = make_client(fault_proxy.hosts)
    registration = make_registration("executor-1", client)
    registration.partitions_changed([0])
    wait_until(registration.registered, timeout=SETTLE_TIMEOUT, what="registered")
    session = client.client_id[0]

    fault_proxy.cut()
    wait_until(
        lambda: node(observer, zk_root, "executor-1") is None,
        timeout=EXPIRY_TIMEOUT,
        what="the server expired the session and its node",
    )
    registration.partitions_changed([0, 5])  # a rebalance while cut off
    fault_proxy.restore()

    wait_until(
        lambda: (node(observer, zk_root, "executor-1") or {}).get("partitions") == [0, 5],
        timeout=RECONNECT_TIMEOUT + SETTLE_TIMEOUT,
        what="the node is back with the partitions held now",
    )
    assert client.client_id[0] != session
    assert observer.exists(registration.path).ephemeralOwner == client.client_id[0]


def test_without_zookeeper_nothing_waits_and_the_executor_registers_once_it_connects(
    make_registration, observer, zk_root, fault_proxy
):
    fault_proxy.cut()
    client = connect_in_background(fault_proxy.hosts, session_timeout=SESSION_TIMEOUT)
    try:
        started = time.monotonic()
        registration = make_registration("executor-1", client)  # stopped by the fixture
        registration.partitions_changed([4])
        assert time.monotonic() - started < 0.5  # neither call waited for ZooKeeper
        time.sleep(1.0)
        assert not registration.registered()

        fault_proxy.restore()
        wait_until(
            lambda: (node(observer, zk_root, "executor-1") or {}).get("partitions") == [4],
            timeout=RECONNECT_TIMEOUT + SETTLE_TIMEOUT,
            what="registered once ZooKeeper answers",
        )
    finally:
        disconnect(client)


def test_a_node_another_session_holds_is_taken_over_when_it_goes(
    make_registration, make_client, observer, zk_root
):
    previous_run = make_client()
    path = ZnodePaths(zk_root).executor("executor-1")
    previous_run.create(path, b"{}", ephemeral=True, makepath=True)
    registration = make_registration("executor-1", make_client())
    registration.partitions_changed([2])
    time.sleep(1.0)
    assert not registration.registered()  # it waits rather than delete another's node

    disconnect(previous_run)

    wait_until(
        lambda: (node(observer, zk_root, "executor-1") or {}).get("partitions") == [2],
        timeout=SETTLE_TIMEOUT,
        what="the node is ours once the other session's is gone",
    )


def test_each_executor_reads_the_others_records_on_its_own_and_keeps_them_current(
    make_registration, make_client
):
    one = make_registration("executor-1", make_client())
    other = make_registration("executor-2", make_client())
    other.partitions_changed(frozenset({0, 1}))
    other.shards_reachable({2})

    def others_seen() -> list[tuple[str, list[int], list[int]]]:
        read = one.peers()
        return (
            []
            if read is None
            else [(r.worker_id, r.partitions, r.reachable_shards) for r in read[1]]
        )

    wait_until(
        lambda: others_seen() == [("executor-2", [0, 1], [2])],
        timeout=SETTLE_TIMEOUT,
        what="executor-1 reads executor-2's record",
    )
    other.partitions_changed(frozenset())  # it lost them: cut off from the broker

    wait_until(
        lambda: others_seen() == [("executor-2", [], [2])],
        timeout=SETTLE_TIMEOUT,
        what="executor-1 reads the change without being asked",
    )
