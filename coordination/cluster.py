"""A read-only look at the cluster in ZooKeeper, for operators.

``cluster_membership`` opens its own short session, reads the scheduler member nodes, each
shard's owner node and the executors' registration nodes (layout in
``coordination.paths``), and closes the session. It writes
nothing and sets no watches, so it cannot disturb the ownership recipe. Any failure is
raised as ``CoordinationUnavailable``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from .client import SaslAuth, client_options
from .errors import CoordinationUnavailable
from .executors import ExecutorRecord, registered_executors
from .paths import ZnodePaths


@dataclass(frozen=True)
class SchedulerMember:
    worker_id: str
    host: str | None
    pid: int | None
    started: str | None  # ISO 8601, as the member wrote it


@dataclass(frozen=True)
class ClusterMembership:
    members: list[SchedulerMember]  # sorted by worker id
    shard_owners: dict[int, str | None]  # None: no owner node (the shard is unowned)
    executors: list[ExecutorRecord]  # sorted by worker id


def cluster_membership(
    *,
    hosts: str,
    root: str,
    shard_ids: Iterable[int],
    timeout: float,
    auth: SaslAuth | None = None,
) -> ClusterMembership:
    """The live scheduler members, each shard's owner and the registered executors;
    ``timeout`` seconds to connect."""
    paths = ZnodePaths(root)
    client = KazooClient(
        hosts=hosts,
        timeout=max(timeout, 2.0),  # the session is ours alone and lives for a few reads
        connection_retry=KazooRetry(max_tries=0),
        command_retry=KazooRetry(max_tries=0),
        **client_options(auth),
    )
    try:
        client.start(timeout=timeout)
    except (KazooTimeoutError, KazooException) as exc:
        raise CoordinationUnavailable(f"no ZooKeeper server at {hosts} answered: {exc}") from exc
    try:
        members = [_member(client, paths, worker) for worker in _children(client, paths.members)]
        owners = {shard: _owner(client, paths, shard) for shard in shard_ids}
        executors = registered_executors(client, root=root)
    except (KazooTimeoutError, KazooException) as exc:
        raise CoordinationUnavailable(f"reading {root} from ZooKeeper failed: {exc}") from exc
    finally:
        client.stop()
        client.close()
    return ClusterMembership(
        members=sorted(filter(None, members), key=lambda m: m.worker_id),
        shard_owners=owners,
        executors=executors,
    )


def _children(client: KazooClient, path: str) -> list[str]:
    try:
        return client.get_children(path)
    except NoNodeError:
        return []


def _member(client: KazooClient, paths: ZnodePaths, worker_id: str) -> SchedulerMember | None:
    try:
        raw, _ = client.get(paths.member(worker_id))
    except NoNodeError:  # left between the listing and this read
        return None
    try:
        data = json.loads(raw or b"{}")
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    pid = data.get("pid")
    return SchedulerMember(
        worker_id=worker_id,
        host=data.get("host"),
        pid=pid if isinstance(pid, int) else None,
        started=data.get("started"),
    )


def _owner(client: KazooClient, paths: ZnodePaths, shard_id: int) -> str | None:
    try:
        raw, _ = client.get(paths.shard_owner(shard_id))
    except NoNodeError:
        return None
    return raw.decode("utf-8", errors="replace") or None
