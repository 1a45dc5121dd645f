"""Fixtures for the coordination tests.

ZooKeeper comes from `JOBSVC_ZK_HOSTS` (set by `python -m tools.devstack test`); tests
that need it skip without it. Each test works under its own root znode.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterable, Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from coordination import ShardOwnership, connect

from .support import FaultProxy, OwnershipLog, PrivateZooKeeper, Recorder, private_zookeeper_missing

# ZooKeeper clamps session timeouts to 2-20 ticks; 4 s fits the local stack (2 s ticks)
# and a private server (0.5 s ticks).
SESSION_TIMEOUT = 4.0  # seconds
CONNECT_TIMEOUT = 10.0  # seconds
STOP_TIMEOUT = 10.0  # seconds for a ShardOwnership or ExecutorRegistration to stop


@pytest.fixture(scope="session")
def zk_hosts() -> str:
    hosts = os.environ.get("JOBSVC_ZK_HOSTS")
    if not hosts:
        pytest.skip("JOBSVC_ZK_HOSTS is not set: these tests need a real ZooKeeper")
    return hosts


@pytest.fixture
def make_client(request) -> Iterator[Callable[..., KazooClient]]:
    """Connect clients (to `JOBSVC_ZK_HOSTS` unless told otherwise); stop them afterwards."""
    clients: list[KazooClient] = []

    def make(hosts: str | None = None) -> KazooClient:
        client = connect(
            hosts or request.getfixturevalue("zk_hosts"),
            session_timeout=SESSION_TIMEOUT,
            connect_timeout=CONNECT_TIMEOUT,
        )
        clients.append(client)
        return client

    yield make
    for client in reversed(clients):
        client.stop()
        client.close()


@pytest.fixture
def observer(make_client) -> KazooClient:
    """A client of the test itself on `JOBSVC_ZK_HOSTS`, for reading znodes."""
    return make_client()


@pytest.fixture
def zk_root() -> str:
    """This test's root znode; `make_ownership` deletes it afterwards."""
    return f"/test-{uuid.uuid4().hex}"


@pytest.fixture
def ownership_log() -> OwnershipLog:
    return OwnershipLog()


@pytest.fixture
def make_ownership(make_client, zk_root, ownership_log) -> Iterator[Callable[..., tuple]]:
    """Start ShardOwnership instances under the test's root; stop them afterwards."""
    started: list[ShardOwnership] = []
    clients: list[KazooClient] = []

    def make(
        worker_id: str,
        *,
        shard_ids: Iterable[int] = range(4),
        client: KazooClient | None = None,
        start: bool = True,
        **callbacks: Callable,
    ) -> tuple[ShardOwnership, Recorder]:
        client = client or make_client()
        clients.append(client)
        recorder = Recorder(worker_id, ownership_log)
        ownership = ShardOwnership(
            client,
            worker_id=worker_id,
            shard_ids=list(shard_ids),
            root=zk_root,
            **{**recorder.callbacks(), **callbacks},
        )
        started.append(ownership)
        if start:
            ownership.start()
        return ownership, recorder

    yield make
    stopped = [ownership.stop(timeout=STOP_TIMEOUT) for ownership in started]
    for client in clients:
        if client.connected:
            with contextlib.suppress(KazooException):
                client.delete(zk_root, recursive=True)
            break
    assert all(stopped), "a ShardOwnership did not stop in time"


@pytest.fixture
def fault_proxy(zk_hosts) -> Iterator[FaultProxy]:
    proxy = FaultProxy(zk_hosts)
    yield proxy
    proxy.close()


@pytest.fixture
def private_zookeeper(tmp_path) -> Iterator[PrivateZooKeeper]:
    missing = private_zookeeper_missing()
    if missing:
        pytest.skip(f"cannot start a private ZooKeeper: {missing}")
    server = PrivateZooKeeper(tmp_path / "zookeeper")
    server.start()
    yield server
    server.kill()
