"""Executors announce themselves in ZooKeeper, so operators can name them, and so that an
executor cut off from a shard can tell whether another can reach it.

Each executor holds one ephemeral node, ``ROOT/executors/<worker_id>`` (layout in
``coordination.paths``), whose data is a JSON ``ExecutorRecord``: who it is, where it runs,
when it started, the jobs-topic partitions the consumer group gave it, and the shards it
reached lately. The node is rewritten when those change, deleted on a clean stop, and goes
with the session when the executor is killed. It is a picture, not a lock: it may lag
behind the consumer group by a round trip, and it is never worth delaying a job for. The
one decision taken from it: an executor that cannot reach a shard leaves the consumer
group for a while if another member reached that shard lately, and joins again once the
shard answers it or no such member holds partitions (``executor_worker.step_back``).

Hence the one rule of ``ExecutorRegistration``: it never blocks the executor. The
executor calls ``partitions_changed`` from its consumer's rebalance callbacks; that only
records the set and wakes the registration's own thread, which does every ZooKeeper
request. If ZooKeeper cannot be reached the executor runs its jobs as ever; the
registration logs a warning and registers when the client (which reconnects on its own,
see ``coordination.client.connect_in_background``) is connected again.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from kazoo.client import KazooClient
from kazoo.exceptions import (
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from kazoo.protocol.states import KazooState

from .paths import DEFAULT_ROOT, ZnodePaths
from .recipe_thread import SYNC, RecipeThread
from .requests import LINK_ERRORS, LinkDown

logger = logging.getLogger(__name__)

RETRY_DELAY = 1.0  # seconds before retrying a write that failed with the connection up
NOT_CONNECTED_WARNING = 10.0  # seconds without a connection before a warning is logged
PEERS_INTERVAL = 1.0  # seconds between reads of the other executors' records


@dataclass(frozen=True)
class ExecutorRecord:
    """What an executor's node says about it."""

    worker_id: str
    host: str | None
    pid: int | None
    started: str | None  # ISO 8601, as the executor wrote it
    partitions: list[int]  # sorted; the jobs-topic partitions assigned to it
    reachable_shards: list[int] = field(default_factory=list)  # sorted; reached lately

    def encode(self) -> bytes:
        return json.dumps(
            {
                "worker_id": self.worker_id,
                "host": self.host,
                "pid": self.pid,
                "started": self.started,
                "partitions": self.partitions,
                "reachable_shards": self.reachable_shards,
            }
        ).encode()

    @classmethod
    def decode(cls, worker_id: str, raw: bytes | None) -> ExecutorRecord:
        """Read a node's data leniently: a field that is missing or malformed is None."""
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            data = {}
        if not isinstance(data, dict):
            data = {}
        pid = data.get("pid")
        host, started = data.get("host"), data.get("started")
        return cls(
            worker_id=worker_id,  # the node's name is the id; the data only repeats it
            host=host if isinstance(host, str) else None,
            pid=pid if isinstance(pid, int) else None,
            started=started if isinstance(started, str) else None,
            partitions=_ints(data.get("partitions")),
            reachable_shards=_ints(data.get("reachable_shards")),
        )


class ExecutorRegistration(RecipeThread):
    """Keeps this executor's node in ZooKeeper for as long as it runs.

    Threading (``coordination.recipe_thread``): the kazoo state listener, the node's watch
    and ``partitions_changed`` (called on the executor's consumer thread) only put an item
    on a queue; every ZooKeeper request runs on the registration's thread. ``stop()``
    deletes the node; it is idempotent and may be called from any thread.

    State transitions (kazoo connection state -> what the registration does):

    - CONNECTED, first or new session: create the node (``makepath``), then watch it.
    - CONNECTED, same session: the node is still ours; write the partitions if they
      changed meanwhile, and watch it again.
    - partitions changed: set the node's data (only if it differs from what was written).
    - the node is deleted or taken by another session: create it again.
    - the node exists for another session (this worker id's previous run, whose session
      has not expired yet, or a second process with the same id): wait for it to go (the
      watch fires), warn, and create ours then.
    - SUSPENDED: nothing to do (the node may still exist); a warning, and requests wait
      for the next CONNECTED.
    - LOST (the session expired): the node is gone; it is created again on the next
      CONNECTED, with the partitions held then.
    - not connected for ``NOT_CONNECTED_WARNING`` seconds: one warning per outage.
    - stop(): delete the node if this session holds it, remove the listener. The client
      itself is the caller's to stop.

    A request that fails with the connection up is retried after ``RETRY_DELAY`` seconds.
    """

    stop_timeout = 5.0  # seconds stop() waits for the node to be deleted

    def __init__(
        self,
        client: KazooClient,
        *,
        worker_id: str,
        root: str = DEFAULT_ROOT,
        host: str | None = None,
        pid: int | None = None,
        peers_interval: float = PEERS_INTERVAL,
    ) -> None:
        """``peers_interval``: seconds between reads of the other executors' records
        (``peers``), on the registration's thread while connected."""
        path = ZnodePaths(root).executor(worker_id)  # validates worker_id
        super().__init__(client, thread_name=f"executor-registration-{worker_id}")
        self._worker_id = worker_id
        self._path = path
        self._root = root
        self._host = host if host is not None else socket.gethostname()
        self._pid = pid if pid is not None else os.getpid()
        self._started = datetime.now(UTC).isoformat(timespec="seconds")

        # Shared with other threads: they put on the queue or replace these whole.
        self._partitions: frozenset[int] = frozenset()
        self._reachable: frozenset[int] = frozenset()
        self._peers: tuple[float, list[ExecutorRecord]] | None = None
        self._registered_view = False

        # Registration-thread state.
        self._connected = False
        self._session_id: int | None = None
        self._written: bytes | None = None  # this session's node holds this data
        self._sync_due = False
        self._peers_interval = peers_interval
        self._next_peers_read = 0.0  # time.monotonic()
        self._retry_at: float | None = None
        self._warn_at: float | None = None  # while not connected: when to warn
        self._waiting_for_other = False

    @property
    def path(self) -> str:
        return self._path

    def record(self) -> ExecutorRecord:
        """What the node says (or will say, once written) now."""
        return ExecutorRecord(
            worker_id=self._worker_id,
            host=self._host,
            pid=self._pid,
            started=self._started,
            partitions=sorted(self._partitions),
            reachable_shards=sorted(self._reachable),
        )

    def registered(self) -> bool:
        """True while this session's node holds the latest partitions as last known."""
        return self._registered_view

    def start(self) -> None:
        """Begin registering in the background; returns at once."""
        self._warn_at = time.monotonic() + NOT_CONNECTED_WARNING
        super().start()

    def partitions_changed(self, partitions: Iterable[int]) -> None:
        """The consumer group assigned this executor ``partitions`` (all of them); never
        blocks: the node is written on the registration's thread."""
        self._partitions = frozenset(partitions)
        self._queue_sync()

    def shards_reachable(self, shards: Iterable[int]) -> None:
        """The shards this executor reached lately (see ``ExecutorWorker``); never blocks."""
        reachable = frozenset(shards)
        if reachable != self._reachable:
            self._reachable = reachable
            self._queue_sync()

    def peers(self) -> tuple[float, list[ExecutorRecord]] | None:
        """The other executors' records as last read, with when (``time.monotonic()``);
        None before the first read. Read every ``peers_interval`` seconds while connected,
        however busy the executor's own thread is."""
        return self._peers

    # -- the registration thread -----------------------------------------------------------

    def _step(self) -> None:
        self._warn_if_long_disconnected()
        if self._connected and (self._sync_due or self._retry_elapsed()):
            self._sync()
        if self._connected and time.monotonic() >= self._next_peers_read:
            self._read_peers()

    def _idle_timeout(self) -> float | None:
        now = time.monotonic()
        if not self._connected:
            return None if self._warn_at is None else max(0.0, self._warn_at - now)
        if self._sync_due:
            return 0.0
        wake_at = self._next_peers_read
        if self._retry_at is not None:
            wake_at = min(wake_at, self._retry_at)
        return max(0.0, wake_at - now)

    def _handle(self, item: str) -> None:
        if item == SYNC:
            self._sync_due = True
        elif item == KazooState.SUSPENDED:
            if self._connected:
                logger.warning(
                    "ZooKeeper connection suspended; jobs run on, the node is written later",
                    extra=self._log_extra(action="suspended"),
                )
            self._disconnected()
        elif item == KazooState.LOST:
            if self._session_id is not None:
                logger.warning(
                    "ZooKeeper session lost; the node is created again on reconnecting",
                    extra=self._log_extra(action="session_lost"),
                )
            self._disconnected()
            self._session_id = None
            self._written = None
        elif item == KazooState.CONNECTED:
            self._connect()

    def _disconnected(self) -> None:
        if self._connected:
            self._warn_at = time.monotonic() + NOT_CONNECTED_WARNING
        self._connected = False
        self._registered_view = False

    def _connect(self) -> None:
        client_id = self._client.client_id
        if client_id is None:
            return  # dropped again already; that state change is queued behind this one
        if client_id[0] != self._session_id:
            self._written = None  # a new session holds no node of ours yet
        self._session_id = client_id[0]
        self._connected = True
        self._warn_at = None
        self._sync_due = True

    def _warn_if_long_disconnected(self) -> None:
        if self._connected or self._warn_at is None or time.monotonic() < self._warn_at:
            return
        self._warn_at = None  # once per outage
        logger.warning(
            "no ZooKeeper connection for %.0f s; jobs run on, but the cluster page cannot "
            "list this executor until it connects",
            NOT_CONNECTED_WARNING,
            extra=self._log_extra(action="not_connected"),
        )

    def _retry_elapsed(self) -> bool:
        return self._retry_at is not None and time.monotonic() >= self._retry_at

    def _sync(self) -> None:
        """Make this session's node hold the current record, and watch it."""
        self._sync_due = False
        self._retry_at = None
        data = self.record().encode()
        try:
            if self._written is None:
                if not self._create(data):
                    return
            elif self._written != data:
                self._zk(self._client.set_async(self._path, data))
                self._written = data
            stat = self._zk(self._client.exists_async(self._path, watch=self._on_watch))
            if stat is None or stat.ephemeralOwner != self._session_id:
                self._written = None  # deleted by someone, or not ours: create it again
                self._sync_due = True
                return
            self._registered_view = self._written == self.record().encode()
        except NoNodeError:  # deleted between our create and the set
            self._written = None
            self._sync_due = True
        except (LinkDown, *LINK_ERRORS):
            logger.info("registration interrupted by the connection", extra=self._log_extra())
            self._retry_at = time.monotonic() + RETRY_DELAY
        except KazooException:
            logger.warning(
                "writing the executor's node failed; retrying",
                exc_info=True,
                extra=self._log_extra(),
            )
            self._retry_at = time.monotonic() + RETRY_DELAY

    def _create(self, data: bytes) -> bool:
        """Create the node for this session; False while another session holds it."""
        try:
            self._zk(self._client.create_async(self._path, data, ephemeral=True, makepath=True))
        except NodeExistsError:
            stat = self._zk(self._client.exists_async(self._path, watch=self._on_watch))
            if stat is None:
                self._sync_due = True  # gone in between: try again at once
                return False
            if stat.ephemeralOwner != self._session_id:
                if not self._waiting_for_other:
                    self._waiting_for_other = True
                    logger.warning(
                        "executor id %s is registered by another session; waiting for it to go",
                        self._worker_id,
                        extra=self._log_extra(action="register_wait"),
                    )
                return False
            # Ours already: a create whose reply the connection lost. Write the data too.
            self._zk(self._client.set_async(self._path, data))
        self._waiting_for_other = False
        self._written = data
        logger.info("registered as an executor", extra=self._log_extra(action="register"))
        return True

    def _read_peers(self) -> None:
        self._next_peers_read = time.monotonic() + self._peers_interval
        try:
            records = registered_executors(self._client, root=self._root)
        except (LinkDown, *LINK_ERRORS, KazooException):
            logger.info("other executors not read", exc_info=True, extra=self._log_extra())
            return
        others = [record for record in records if record.worker_id != self._worker_id]
        self._peers = (time.monotonic(), others)

    def _shutdown(self) -> None:
        # Delete the node only if this session holds it: another process with the same id
        # may have registered meanwhile. Without a connection it goes when the caller stops
        # the client (or when the session expires).
        try:
            if self._connected and self._written is not None:
                stat = self._zk(self._client.exists_async(self._path))
                if stat is not None and stat.ephemeralOwner == self._session_id:
                    self._zk(self._client.delete_async(self._path))
        except NoNodeError:
            pass
        except (LinkDown, *LINK_ERRORS, KazooException):
            logger.warning(
                "could not delete the executor's node on stop",
                exc_info=True,
                extra=self._log_extra(),
            )
        self._registered_view = False
        logger.info("executor registration stopped", extra=self._log_extra(action="stop"))

    def _log_extra(self, action: str | None = None) -> dict:
        return {"worker_id": self._worker_id, "action": action}


def registered_executors(client: KazooClient, *, root: str) -> list[ExecutorRecord]:
    """Every executor registered under ``root``, sorted by worker id; kazoo errors pass.

    For readers that hold a session already (``coordination.cluster``); sets no watches.
    """
    paths = ZnodePaths(root)
    try:
        names = client.get_children(paths.executors)
    except NoNodeError:
        return []
    records = []
    for name in sorted(names):
        try:
            raw, _ = client.get(paths.executor(name))
        except NoNodeError:  # left between the listing and this read
            continue
        records.append(ExecutorRecord.decode(name, raw))
    return records


def _ints(value) -> list[int]:
    if not isinstance(value, list):
        return []
    return sorted(item for item in value if isinstance(item, int) and not isinstance(item, bool))
