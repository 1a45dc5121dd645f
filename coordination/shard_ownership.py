"""Shard ownership for scheduler workers: which live worker publishes which shard's due jobs.

Each worker registers an ephemeral member node; all workers watch the member list and
compute the same split with `assign_shards`. A worker owns a shard while it holds that
shard's ephemeral owner node (layout in `coordination.paths`):

- Release before acquire. A worker gives up a shard it is no longer assigned by calling
  `on_released` and only then deleting the owner node, so the next owner (whose create
  succeeds only after the delete) never overlaps with it in the worker's own view.
- An owner node that still exists belongs to a worker that has not released it yet, or to
  a dead worker whose session has not expired yet. The new owner watches it and creates its
  own node the moment it is deleted. A killed worker's shards therefore move within about
  one session timeout (ZooKeeper removes its ephemeral nodes when the session expires and
  the survivors' member watch fires).
- `on_acquired` is called only after this session's create succeeded, or after this
  session is found to hold the node already (a create whose reply was lost to a dropped
  connection is adopted, not waited for).

ZooKeeper ownership alone is advisory. A worker learns that its session expired only when
it reconnects; until then, and during a GC pause, a swap storm or a stopped VM, it can
still believe it owns a shard that ZooKeeper has already handed to another worker, and a
write it sent before losing the shard can arrive after the new owner started.
`on_suspended` narrows that window but cannot close it. The shard database must therefore
fence: the scheduler bumps a per-shard epoch in the shard database in `on_acquired` and
makes every claim and publish-mark conditional on that epoch, so a stale owner's writes
match zero rows. Fencing lives in the scheduler, not here.

SetPartitioner is not used: it waits for the member list to be quiet for `time_boundary`
(30 s by default) before allocating, and treats SUSPENDED as "release everything".
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from kazoo.client import KazooClient
from kazoo.exceptions import (
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from kazoo.protocol.states import KazooState

from .assignment import assign_shards
from .paths import DEFAULT_ROOT, ZnodePaths
from .recipe_thread import SYNC, RecipeThread
from .requests import LINK_ERRORS, LinkDown

logger = logging.getLogger(__name__)

RETRY_DELAY = 1.0  # seconds before retrying a sync that failed with the connection still up
RESYNC_INTERVAL = 30.0  # seconds between full re-reads when no watch fired (a safety net)
# Seconds of SUSPENDED after which the session is given up (see _give_up_session). Well
# above the session timeouts used here (4-5 s), so the server has expired it by then.
SUSPENDED_LIMIT = 30.0


class ShardOwnership(RecipeThread):
    """Owns this worker's share of the shards for as long as its ZooKeeper session lives.

    Threading (`coordination.recipe_thread`): the kazoo state listener and the watch
    callbacks run on kazoo's threads and only put an item on a queue; every ZooKeeper
    request and every callback into the worker (`on_acquired`, `on_released`,
    `on_suspended`, `on_resumed`) runs on the recipe thread, one at a time, in order.
    Callbacks should return quickly: a SUSPENDED that arrives meanwhile is handled when the
    running callback returns. A callback that raises is logged; an `on_acquired`
    that raises means "not acquired": the node is deleted and acquisition retried.
    `owned()` may be called from any thread. `stop()` is idempotent and may be called from
    a signal handler or from a callback.

    State transitions (kazoo connection state -> what the recipe does):

    - CONNECTED, first or new session: register the member node, then sync.
    - sync (on CONNECTED, on any watch, every RESYNC_INTERVAL): read the members with a
      watch; for shards no longer assigned, `on_released` then delete the owner node; for
      assigned shards, create the owner node and `on_acquired`, or watch the existing node
      and retry when it is deleted.
    - SUSPENDED: `on_suspended()` at once; no requests until the connection is back.
      Ephemeral nodes may still exist, so nothing is released.
    - CONNECTED, same session: `on_resumed()`, then sync (kazoo drops every watch on
      SUSPENDED, so they are set again).
    - LOST (session expired or the client was stopped): every ephemeral node is gone;
      `on_released` for every owned shard. If kazoo connects again (a new session), it goes
      on as CONNECTED above: `on_resumed()` if `on_suspended()` came before, register, sync
      (acquisitions call `on_acquired` again).
    - SUSPENDED for `suspended_limit` seconds: `on_released` for every owned shard, and
      kazoo may now connect to a server that has seen fewer transactions than it has.
      A ZooKeeper restored without its data refuses such clients, and kazoo would retry
      forever; once connected there, the old session is expired and a new one starts
      as above. If the old session comes back after all, its owner nodes are deleted and
      the shards acquired again.
    - stop(): `on_released` for every owned shard, delete their owner nodes, delete the
      member node, remove the listener. The client itself is the caller's to stop.

    Every `on_suspended()` is followed by at most one `on_resumed()`, before any new
    `on_acquired`; `on_released` for a shard always precedes deleting its owner node.
    """

    def __init__(
        self,
        client: KazooClient,
        *,
        worker_id: str,
        shard_ids: Sequence[int],
        on_acquired: Callable[[int], None],
        on_released: Callable[[int], None],
        on_suspended: Callable[[], None],
        on_resumed: Callable[[], None],
        root: str = DEFAULT_ROOT,
        suspended_limit: float = SUSPENDED_LIMIT,
    ) -> None:
        if suspended_limit <= 0:
            raise ValueError("suspended_limit must be positive")
        paths = ZnodePaths(root)
        member_path = paths.member(worker_id)  # validates worker_id
        super().__init__(client, thread_name=f"shard-ownership-{worker_id}")
        self._suspended_limit = suspended_limit
        self._paths = paths
        self._member_path = member_path
        self._worker_id = worker_id
        self._shard_ids = tuple(sorted(set(shard_ids)))
        self._on_acquired = on_acquired
        self._on_released = on_released
        self._on_suspended = on_suspended
        self._on_resumed = on_resumed
        self._member_data = json.dumps(
            {"host": socket.gethostname(), "pid": os.getpid(), "started": _utc_now()}
        ).encode()

        # Shared with other threads: owned() and members() read frozensets the recipe
        # thread replaces whole.
        self._owned_view: frozenset[int] = frozenset()
        self._members_view: frozenset[str] = frozenset()

        # Recipe-thread state.
        self._connected = False
        self._session_id: int | None = None
        self._registered = False
        self._paused = False  # on_suspended() called, on_resumed() not yet
        self._owned: set[int] = set()  # on_acquired returned, on_released not yet called
        self._stale: set[int] = set()  # this session may hold these owner nodes unused
        self._sync_due = False
        self._retry_at: float | None = None
        self._give_up_at: float | None = None  # while disconnected with the session kept

    def owned(self) -> frozenset[int]:
        """The shards this worker owns now (acquired and not yet released)."""
        return self._owned_view

    def members(self) -> frozenset[str]:
        """The workers in the member list as last read (this one included, once registered)."""
        return self._members_view

    # -- the recipe thread ----------------------------------------------------------------

    def _step(self) -> None:
        if self._give_up_at is not None and time.monotonic() >= self._give_up_at:
            self._give_up_session()
        if self._connected and (self._sync_due or self._retry_elapsed()):
            self._sync()

    def _on_idle(self) -> None:
        self._sync_due = True  # a retry or the resync is due

    def _idle_timeout(self) -> float:
        if not self._connected:
            if self._give_up_at is not None:
                return max(0.0, self._give_up_at - time.monotonic())
            return RESYNC_INTERVAL  # nothing to do until the next CONNECTED is queued
        if self._sync_due:
            return 0.0
        if self._retry_at is not None:
            return max(0.0, self._retry_at - time.monotonic())
        return RESYNC_INTERVAL

    def _handle(self, item: str) -> None:
        if item == SYNC:
            self._sync_due = True
        elif item == KazooState.SUSPENDED:
            self._suspend()
        elif item == KazooState.LOST:
            self._lose_session()
        elif item == KazooState.CONNECTED:
            self._connect()

    def _suspend(self) -> None:
        self._connected = False
        if self._give_up_at is None and self._session_id is not None:
            self._give_up_at = time.monotonic() + self._suspended_limit
        if not self._paused:
            self._paused = True
            logger.warning("ZooKeeper connection suspended", extra=self._log_extra())
            self._call(self._on_suspended)

    def _lose_session(self) -> None:
        self._connected = False
        self._give_up_at = None  # kazoo starts a new session on its own
        self._session_id = None
        self._registered = False
        self._stale.clear()  # the session's ephemeral nodes are gone with it
        if self._owned:
            logger.warning(
                "ZooKeeper session lost; releasing shards %s",
                sorted(self._owned),
                extra=self._log_extra(action="session_lost"),
            )
        for shard_id in sorted(self._owned):
            self._forget(shard_id)

    def _connect(self) -> None:
        client_id = self._client.client_id
        if client_id is None:
            return  # dropped again already; that state change is queued behind this one
        if self._session_id is not None and client_id[0] != self._session_id:
            self._lose_session()  # a new session without a LOST seen first: same meaning
        self._session_id = client_id[0]
        self._connected = True
        self._give_up_at = None
        self._sync_due = True
        if self._paused:
            self._paused = False
            logger.info("ZooKeeper connection resumed", extra=self._log_extra())
            self._call(self._on_resumed)

    def _give_up_session(self) -> None:
        """Suspended too long: release the shards, and let kazoo take any server.

        kazoo tells a server the last transaction it saw, and a server that has seen less
        (restored without its data) refuses it; kazoo resets that number only for a new
        session, which it starts only after a server said the old one expired. Setting it
        to 0, as kazoo does for a new session, breaks the loop. The session id is kept:
        if the old session is alive after all, the member node is still recognised as
        ours, and the owner nodes, marked stale, are deleted at the next sync.
        """
        self._give_up_at = None
        owned = sorted(self._owned)
        logger.error(
            "ZooKeeper unreachable for %.0f s; releasing shards %s and accepting any server",
            self._suspended_limit,
            owned,
            extra=self._log_extra(action="session_given_up"),
        )
        for shard_id in owned:
            self._forget(shard_id)
        self._stale.update(owned)
        self._registered = False
        self._client.last_zxid = 0

    def _retry_elapsed(self) -> bool:
        return self._retry_at is not None and time.monotonic() >= self._retry_at

    def _sync(self) -> None:
        """Converge on this worker's assignment: release first, then acquire."""
        self._sync_due = False
        self._retry_at = None
        try:
            if not self._register():
                return
            for shard_id in sorted(self._stale):
                self._delete_owner_node(shard_id)
            assigned = self._assigned()
            for shard_id in sorted(self._owned - assigned):
                self._release(shard_id)
            self._check_owned()
            for shard_id in sorted(assigned - self._owned):
                self._acquire(shard_id)
        except (LinkDown, *LINK_ERRORS):
            logger.info("sync interrupted by the connection", extra=self._log_extra())
            self._retry_at = time.monotonic() + RETRY_DELAY
        except KazooException:
            logger.warning("sync failed; retrying", exc_info=True, extra=self._log_extra())
            self._retry_at = time.monotonic() + RETRY_DELAY

    def _register(self) -> bool:
        """Make sure this session holds the member node; False while another session does."""
        if self._registered:
            return True
        try:
            self._zk(
                self._client.create_async(
                    self._member_path, self._member_data, ephemeral=True, makepath=True
                )
            )
        except NodeExistsError:
            stat = self._zk(self._client.exists_async(self._member_path, watch=self._on_watch))
            if stat is None:
                self._sync_due = True  # gone in between: try again at once
                return False
            if stat.ephemeralOwner != self._session_id:
                # A previous run of this worker whose session has not expired yet, or a
                # second process with the same id. The watch fires when the node goes.
                logger.warning(
                    "worker id %s is registered by another session; waiting for it to go",
                    self._worker_id,
                    extra=self._log_extra(action="register_wait"),
                )
                return False
        self._registered = True
        logger.info("registered as a scheduler member", extra=self._log_extra())
        return True

    def _assigned(self) -> set[int]:
        members = self._zk(
            self._client.get_children_async(self._paths.members, watch=self._on_watch)
        )
        self._members_view = frozenset(members)
        if self._worker_id not in members:
            # Someone deleted our member node: the others no longer count us, so we give
            # everything back (below) and register again on the next sync.
            self._registered = False
            self._sync_due = True
        return set(assign_shards(sorted(members), self._shard_ids).get(self._worker_id, ()))

    def _release(self, shard_id: int) -> None:
        logger.info("releasing shard", extra=self._log_extra(shard_id, "release"))
        self._forget(shard_id)
        self._stale.add(shard_id)
        self._delete_owner_node(shard_id)

    def _check_owned(self) -> None:
        """Re-watch the owned nodes; a shard whose node is gone or not ours is released."""
        for shard_id in sorted(self._owned):
            path = self._paths.shard_owner(shard_id)
            stat = self._zk(self._client.exists_async(path, watch=self._on_watch))
            if stat is None or stat.ephemeralOwner != self._session_id:
                logger.warning(
                    "owner node vanished; releasing shard",
                    extra=self._log_extra(shard_id, "owner_node_lost"),
                )
                self._forget(shard_id)

    def _acquire(self, shard_id: int) -> None:
        path = self._paths.shard_owner(shard_id)
        # Until on_acquired succeeds, a node this session may hold is stale: if the create's
        # reply is lost, the next sync deletes (and, if still assigned, recreates) it.
        self._stale.add(shard_id)
        try:
            self._zk(
                self._client.create_async(
                    path, self._worker_id.encode(), ephemeral=True, makepath=True
                )
            )
        except NodeExistsError:
            stat = self._zk(self._client.exists_async(path, watch=self._on_watch))
            if stat is None:
                self._sync_due = True  # deleted in between: try again at once
                return
            if stat.ephemeralOwner != self._session_id:
                self._stale.discard(shard_id)
                logger.debug(
                    "shard still owned elsewhere; watching", extra=self._log_extra(shard_id)
                )
                return
            # Already ours: a create whose reply was lost, now adopted.
        if self._call(self._on_acquired, shard_id):
            self._stale.discard(shard_id)
            self._owned.add(shard_id)
            self._owned_view = frozenset(self._owned)
            logger.info("acquired shard", extra=self._log_extra(shard_id, "acquire"))
        else:
            self._delete_owner_node(shard_id)
            self._retry_at = time.monotonic() + RETRY_DELAY

    def _forget(self, shard_id: int) -> None:
        """Stop owning a shard in memory and tell the worker; ZooKeeper is not touched."""
        self._owned.discard(shard_id)
        self._owned_view = frozenset(self._owned)
        self._call(self._on_released, shard_id)

    def _delete_owner_node(self, shard_id: int) -> None:
        """Delete the shard's owner node if this session holds it."""
        self._delete_if_ours(self._paths.shard_owner(shard_id))
        self._stale.discard(shard_id)

    def _delete_if_ours(self, path: str) -> None:
        stat = self._zk(self._client.exists_async(path))
        if stat is None or stat.ephemeralOwner != self._session_id:
            return
        with contextlib.suppress(NoNodeError):  # gone meanwhile: what we wanted
            self._zk(self._client.delete_async(path, version=stat.version))

    def _shutdown(self) -> None:
        # 1. Tell the worker first, so it stops dispatching before anyone else can own a
        #    shard (their create succeeds only after our delete in step 2).
        for shard_id in sorted(self._owned):
            self._release_for_shutdown(shard_id)
        # 2. Delete owner nodes, then the member node: peers react to the member change and
        #    find the owner nodes already gone. Without a connection, they go when the
        #    caller stops the client (or when the session expires).
        try:
            if self._connected:
                for shard_id in sorted(self._stale):
                    self._delete_owner_node(shard_id)
                self._delete_if_ours(self._member_path)
        except (LinkDown, *LINK_ERRORS, KazooException):
            logger.warning("could not delete nodes on stop", exc_info=True, extra=self._log_extra())
        logger.info("shard ownership stopped", extra=self._log_extra(action="stop"))

    def _release_for_shutdown(self, shard_id: int) -> None:
        self._forget(shard_id)
        self._stale.add(shard_id)

    def _call(self, callback: Callable[..., None], *args: int) -> bool:
        """Run a worker callback; log and report False if it raises."""
        try:
            callback(*args)
        except Exception:
            logger.exception(
                "%s raised",
                getattr(callback, "__name__", repr(callback)),
                extra=self._log_extra(*args[:1]),
            )
            return False
        return True

    def _log_extra(self, shard_id: int | None = None, action: str | None = None) -> dict:
        return {"worker_id": self._worker_id, "shard": shard_id, "action": action}


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
