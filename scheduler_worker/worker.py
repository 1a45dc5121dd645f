"""The scheduler worker: shard ownership from ZooKeeper, one dispatcher per owned shard.

Shutdown order (``stop()`` only sets an event; ``run()`` does the work):
1. release every shard in ZooKeeper: each dispatcher finishes its round and stops before
   its owner node is deleted, so the next owner never overlaps with a running round;
2. flush the producer, so every claimed job's message is acknowledged or the job released;
3. close the ZooKeeper session and the database connections.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import DatabaseError, connections
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from coordination.client import SaslAuth, connect
from coordination.paths import ZnodePaths
from coordination.shard_ownership import SUSPENDED_LIMIT, ShardOwnership
from jobsvc.messaging.renewing_producer import RenewingProducer
from jobsvc.sharding.shards import shard_alias
from scheduler_worker import metrics
from scheduler_worker.dispatch_config import DispatchConfig
from scheduler_worker.dispatcher import ShardDispatcher
from scheduler_worker.shard_store import ShardStore

logger = logging.getLogger(__name__)

_DISPATCHER_STOP_TIMEOUT = 30.0  # seconds a dispatcher may take to finish its round
_HEALTH_CHECK_INTERVAL = 1.0  # seconds between checks for shards failing on this worker
_REACQUIRE_DELAY = 1.0  # seconds before a fenced shard that ZooKeeper still gives us is retaken
_PROBE_TIMEOUT = 1.0  # seconds a stepped-back worker waits for the broker's answer


class SchedulerWorker:
    def __init__(
        self,
        *,
        worker_id: str,
        shard_ids: list[int],
        zk_hosts: str,
        zk_root: str,
        zk_session_timeout: float,
        kafka_bootstrap: str,
        dispatch: DispatchConfig,
        weight_refresh_seconds: float,
        unhealthy_after: float = 10.0,
        step_back_after: float = 3.0,
        step_back_seconds: float = 30.0,
        zk_auth: SaslAuth | None = None,  # the ZooKeeper user; None: no authentication
    ) -> None:
        self.worker_id = worker_id
        self.shard_ids = shard_ids
        self.zk_hosts = zk_hosts
        self.zk_root = zk_root
        self.zk_session_timeout = zk_session_timeout
        self.zk_auth = zk_auth
        self.kafka_bootstrap = kafka_bootstrap
        self.dispatch = dispatch
        self.weight_refresh_seconds = weight_refresh_seconds
        self.unhealthy_after = unhealthy_after  # seconds of failed rounds before /readyz fails
        self.step_back_after = step_back_after  # seconds of failed rounds before stepping back
        self.step_back_seconds = step_back_seconds  # away from membership after stepping back
        self._dispatchers: dict[int, ShardDispatcher] = {}
        self._retiring: set[ShardDispatcher] = set()  # released, finishing their round
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._producer: RenewingProducer | None = None
        self._ownership: ShardOwnership | None = None
        self._stepped_back_until: float | None = None  # monotonic time to join again
        self._stepped_back_for: list[int] = []  # the shards whose rounds failed

    def stop(self) -> None:
        """Ask the worker to shut down; safe from a signal handler, idempotent."""
        self._stopping.set()

    def run(self) -> None:
        metrics.SHARDS_CONFIGURED.set(len(self.shard_ids))
        for shard_id in self.shard_ids:
            metrics.SHARD_OWNED.labels(str(shard_id)).set(0)
        # librdkafka reports a message it could not deliver within the publish timeout as
        # failed, and the dispatcher makes its job due again (should the broker have taken
        # it after all, the executor drops the duplicate).
        self._producer = RenewingProducer.publishing_within(
            self.dispatch.publish_timeout,
            bootstrap=self.kafka_bootstrap,
            client_id=f"scheduler-{self.worker_id}",
        )
        client = connect(
            self.zk_hosts,
            session_timeout=self.zk_session_timeout,
            connect_timeout=30.0,
            auth=self.zk_auth,
        )
        self._join(client)
        logger.info(
            "scheduler %s started; %d shards in the pool", self.worker_id, len(self.shard_ids)
        )
        try:
            while not self._stopping.wait(_HEALTH_CHECK_INTERVAL):
                self._step_back_if_failing_alone(client)
        finally:
            logger.info("scheduler %s stopping", self.worker_id)
            if self._ownership is not None:
                self._ownership.stop()
            for shard_id in self._current_dispatchers():  # in case a release callback was missed
                self._on_released(shard_id)
            self._join_retiring()  # their last publishes go out before the producer closes
            self._producer.close()
            client.stop()
            client.close()
            connections.close_all()
            logger.info("scheduler %s stopped", self.worker_id)

    def _join(self, client) -> None:
        """Become a member: ZooKeeper ownership starts handing this worker its shards."""
        ownership = ShardOwnership(
            client,
            worker_id=self.worker_id,
            shard_ids=self.shard_ids,
            on_acquired=self._on_acquired,
            on_released=self._on_released,
            on_suspended=self._on_suspended,
            on_resumed=self._on_resumed,
            root=self.zk_root,
            # Several session timeouts: by then the server has surely expired the session.
            suspended_limit=max(SUSPENDED_LIMIT, 3 * self.zk_session_timeout),
        )
        with self._lock:
            self._ownership = ownership
            self._stepped_back_until = None
            self._stepped_back_for = []
        ownership.start()

    def _step_back_if_failing_alone(self, client) -> None:
        """Leave for a while if an owned shard fails here while other schedulers run.

        A shard whose rounds all fail on this worker (it cannot reach that database, or
        its connection hangs) would otherwise stay with it for as long as its ZooKeeper
        session lives. If other members exist, this worker leaves (its shards move to them
        within moments: a clean release). It joins again as soon as the broker and the
        databases of the shards that failed answer it (the fault is over: should another
        member be cut off meanwhile, this one can take its shards), and after
        ``step_back_seconds`` at the latest. If the fault is not this worker's own (a
        database or the broker down for everyone), the next owner fails too, and the last
        member keeps the shard, ready the moment it is back; and when every scheduler
        stepped back at once, each joins again as soon as it sees no member left, so the
        shards are never without an owner for long.
        """
        ownership = self._ownership
        if ownership is None:
            if (
                time.monotonic() >= (self._stepped_back_until or 0.0)
                or self._nobody_else(client)
                or self._reaches_again(self._stepped_back_for)
            ):
                self._join(client)
            return
        failing = self._failing_shards(self.step_back_after)
        if not failing or len(ownership.members() - {self.worker_id}) == 0:
            return
        logger.error(
            "shards %s: every dispatch round failed for %.0f s while other schedulers run: "
            "leaving for %.0f s so that they take the shards",
            failing,
            self.step_back_after,
            self.step_back_seconds,
            extra={"action": "step_back"},
        )
        metrics.OWNERSHIP_CHANGES.labels("stepped_back").inc()
        with self._lock:
            self._ownership = None
            self._stepped_back_until = time.monotonic() + self.step_back_seconds
            self._stepped_back_for = failing
        ownership.stop()

    def _nobody_else(self, client) -> bool:
        """True when no scheduler is a member now (read from ZooKeeper; False if unknown)."""
        members = client.get_children_async(ZnodePaths(self.zk_root).members)
        try:
            return not members.get(timeout=_HEALTH_CHECK_INTERVAL)
        except (KazooException, KazooTimeoutError):  # disconnected, or no members node yet
            return False

    def _reaches_again(self, shards: list[int]) -> bool:
        """Whether the broker and the databases of ``shards`` answer this worker now."""
        if not self._producer.broker_answers(_PROBE_TIMEOUT):
            return False
        for shard_id in shards:
            connection = connections[shard_alias(shard_id)]
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT 1")
            except DatabaseError:
                return False
            finally:
                connection.close()  # a probe's connection is not kept
        logger.info(
            "the broker and shards %s answer again: joining again",
            shards,
            extra={"action": "rejoin"},
        )
        return True

    def _failing_shards(self, longer_than: float) -> list[int]:
        return sorted(
            shard_id
            for shard_id, dispatcher in self._current_dispatchers().items()
            if dispatcher.failing_for() > longer_than
        )

    def _current_dispatchers(self) -> dict[int, ShardDispatcher]:
        with self._lock:
            return dict(self._dispatchers)

    # --- ShardOwnership callbacks (on the recipe's thread) ------------------------------

    def _new_dispatcher(self, shard_id: int, *, acquire_delay: float = 0.0) -> ShardDispatcher:
        return ShardDispatcher(
            store=ShardStore(alias=shard_alias(shard_id), shard_id=shard_id),
            owner=self.worker_id,
            producer=self._producer,
            config=self.dispatch,
            weight_refresh_seconds=self.weight_refresh_seconds,
            on_fenced=self._on_fenced,
            clock=time.monotonic,
            acquire_delay=acquire_delay,
        )

    def _on_acquired(self, shard_id: int) -> None:
        dispatcher = self._new_dispatcher(shard_id)
        with self._lock:
            previous = self._dispatchers.pop(shard_id, None)
            self._dispatchers[shard_id] = dispatcher
        if previous is not None:
            previous.stop()
            previous.join(_DISPATCHER_STOP_TIMEOUT)
        dispatcher.start()
        metrics.SHARD_OWNED.labels(str(shard_id)).set(1)
        metrics.OWNERSHIP_CHANGES.labels("acquired").inc()
        logger.info("shard %s acquired", shard_id, extra={"shard": shard_id, "action": "own"})

    def _on_released(self, shard_id: int) -> None:
        """Stop the shard's dispatcher without waiting for its round to end, so that the
        owner node goes at once: a round stuck on a cut connection would otherwise hold
        the shard from the next owner until TCP gives up. Whatever it still writes is
        fenced by the next owner's lease (docs/design/fencing.md)."""
        with self._lock:
            dispatcher = self._dispatchers.pop(shard_id, None)
            if dispatcher is None:
                return
            self._retiring.add(dispatcher)
        dispatcher.stop()
        threading.Thread(
            target=self._retire, args=(dispatcher,), name=f"retire-shard-{shard_id}", daemon=True
        ).start()
        metrics.SHARD_OWNED.labels(str(shard_id)).set(0)
        metrics.OWNERSHIP_CHANGES.labels("released").inc()
        logger.info("shard %s released", shard_id, extra={"shard": shard_id, "action": "release"})

    def _retire(self, dispatcher: ShardDispatcher) -> None:
        if not dispatcher.join(_DISPATCHER_STOP_TIMEOUT):
            logger.error("shard %s: dispatcher did not stop in time", dispatcher.store.shard_id)
        with self._lock:
            self._retiring.discard(dispatcher)

    def _join_retiring(self) -> None:
        """Wait for released dispatchers to finish their round (shutdown)."""
        with self._lock:
            retiring = list(self._retiring)
        for dispatcher in retiring:
            dispatcher.join(_DISPATCHER_STOP_TIMEOUT)

    def _on_suspended(self) -> None:
        logger.warning("ZooKeeper connection suspended: pausing dispatch")
        for dispatcher in self._current_dispatchers().values():
            dispatcher.pause()

    def _on_resumed(self) -> None:
        logger.info("ZooKeeper connection restored: resuming dispatch")
        for dispatcher in self._current_dispatchers().values():
            dispatcher.resume()

    def _on_fenced(self, fenced: ShardDispatcher) -> None:
        """Someone bumped the shard's epoch after this dispatcher took it (on its thread).

        Usually a new owner that ZooKeeper gave the shard to: the recipe releases it here
        soon, and the stale dispatcher must not write meanwhile. But the bump may also come
        from an older dispatcher whose ACQUIRE_LEASE was still in flight when it was told
        to stop (a database that answered late): then ZooKeeper still says the shard is
        ours, and nobody would dispatch it if this worker only stopped. So while the
        recipe holds the shard, a new dispatcher takes the lease again after a pause;
        a real new owner gets it back through ZooKeeper at the latest then.
        """
        shard_id = fenced.store.shard_id
        metrics.OWNERSHIP_CHANGES.labels("fenced").inc()
        with self._lock:
            if self._dispatchers.get(shard_id) is not fenced:
                return  # already replaced or released: nothing to stop or restart
            ownership = self._ownership
            if ownership is None or shard_id not in ownership.owned() or self._stopping.is_set():
                del self._dispatchers[shard_id]
                metrics.SHARD_OWNED.labels(str(shard_id)).set(0)
                return
            replacement = self._new_dispatcher(shard_id, acquire_delay=_REACQUIRE_DELAY)
            self._dispatchers[shard_id] = replacement
        logger.warning(
            "shard %s: fenced, but ZooKeeper still gives it to us: taking the lease again "
            "in %.0f s",
            shard_id,
            _REACQUIRE_DELAY,
            extra={"shard": shard_id, "action": "reacquire"},
        )
        replacement.start()

    # --- health ---------------------------------------------------------------------

    def readiness(self) -> list[str]:
        """What keeps this worker from doing its work; empty while it does (``/readyz``)."""
        problems = []
        with self._lock:
            dispatchers = dict(self._dispatchers)
            stepped_back_until = self._stepped_back_until
        if stepped_back_until is not None:
            left = max(0.0, stepped_back_until - time.monotonic())
            problems.append(
                "stepped back after failing rounds; joining again once the broker and those "
                f"shards answer, in {left:.0f} s at the latest"
            )
        for shard_id, dispatcher in sorted(dispatchers.items()):
            failing = dispatcher.failing_for()
            if failing > self.unhealthy_after:
                problems.append(
                    f"shard {shard_id}: every dispatch round failed for {failing:.0f} s"
                )
        return problems
