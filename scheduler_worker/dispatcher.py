"""Dispatching one shard: its own thread runs the shard's rounds while the worker owns it.

The thread takes the shard's lease (its epoch fences every later write), then loops:
sweep when due (``scheduler_worker.sweeper``), one round (``scheduler_worker.shard_rounds``),
and a pause so that rounds start ``poll_interval`` apart, or ``WOKEN_ROUND_GAP`` when the
API says jobs are due now on the shard (``jobsvc.jobs.store.notify_due_now``). A database
or broker error drops the thread's connections and waits ``_ERROR_BACKOFF_SECONDS``; the
time since the last round that worked is what the worker's readiness reports
(``failing_for``).

A job is always either scheduled in the database, or queued while its message is published.
If the worker dies between claim and acknowledgement, the next owner makes the job due again
as it takes the shard over (``ShardStore.reset_older_dispatches``), and the sweeper does
when its queued lease expires; a duplicate message that may result is dropped by the
executor's claim. A stopping dispatcher waits for its acknowledgements (at most the publish
timeout) and releases what failed before it lets the shard go.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable

from django.db import Error as DatabaseError
from django.db import connections

from jobsvc.messaging.producer import Producer
from scheduler_worker import metrics
from scheduler_worker.dispatch_config import DispatchConfig
from scheduler_worker.errors import MessagesNotAcknowledged, ShardFenced
from scheduler_worker.shard_rounds import ShardRounds
from scheduler_worker.shard_store import ShardStore
from scheduler_worker.sweeper import ShardSweeper
from scheduler_worker.weights import WeightBook

logger = logging.getLogger(__name__)

_ERROR_BACKOFF_SECONDS = 1.0  # after a database or broker error, before the next round
_STOP_CHECK_SECONDS = 0.1  # the longest a wait for the next round goes without seeing a stop
# When the API says jobs are due now, the next round starts this long after the last at the
# soonest: 20 rounds a second at most, however many come (the cost: docs/design/fairness.md).
WOKEN_ROUND_GAP = 0.05
ROUND_RECORD_INTERVAL = 1.0  # seconds; at most one write of the last round's time per shard


class ShardDispatcher:
    """Runs one shard's dispatch rounds (``rounds``) on its own thread while the worker owns it.

    States: starting (acquiring the lease epoch) -> running <-> paused -> stopped.
    ``pause()`` (ZooKeeper connection SUSPENDED) stops new claims at once; ``stop()``
    lets the current round finish. A fenced write (another worker took the shard) stops
    the dispatcher and reports it through ``on_fenced``.
    """

    def __init__(
        self,
        *,
        store: ShardStore,
        owner: str,
        producer: Producer,
        config: DispatchConfig,
        weight_refresh_seconds: float,
        on_fenced: Callable[[ShardDispatcher], None],
        clock: Callable[[], float],
        acquire_delay: float = 0.0,
    ) -> None:
        self.store = store
        self.owner = owner
        self.config = config
        self.on_fenced = on_fenced
        self.clock = clock
        self.rounds = ShardRounds(
            store=store,
            producer=producer,
            config=config,
            weights=WeightBook(refresh_seconds=weight_refresh_seconds, clock=clock),
            clock=clock,
        )
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"dispatch-shard-{store.shard_id}", daemon=True
        )
        self._next_round_record = 0.0
        self._shard_label = str(store.shard_id)
        self._acquire_delay = acquire_delay  # seconds to wait before taking the lease
        # Since when every round failed (clock time), None while rounds succeed.
        self._failing_since: float | None = None
        self._sweeper = ShardSweeper(
            store=store,
            producer=producer,
            dead_letter_topic=config.dead_letter_topic,
            publish_timeout=config.publish_timeout,
            sweep_interval=config.sweep_interval,
            clock=clock,
        )

    # --- control, from any thread -----------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def pause(self) -> None:
        self.rounds.pause()

    def resume(self) -> None:
        self.rounds.resume()

    def stop(self) -> None:
        self._stopped.set()
        self.rounds.resume()  # wakes a paused thread so it can exit

    def join(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def failing_for(self) -> float:
        """Seconds since the last round that worked, if every round since has failed."""
        since = self._failing_since
        return 0.0 if since is None else max(0.0, self.clock() - since)

    # --- the dispatch thread ----------------------------------------------------------

    def _run(self) -> None:
        shard = self.store.shard_id
        try:
            if self._stopped.wait(self._acquire_delay):
                return
            epoch = self._acquire_lease()
            if epoch is None:
                return
            self.rounds.epoch = epoch
            metrics.SHARD_FAILING.labels(self._shard_label).set(0)
            logger.info(
                "shard %s: dispatching under epoch %s",
                shard,
                epoch,
                extra={"shard": shard, "epoch": epoch, "action": "acquire"},
            )
            while not self._stopped.is_set():
                self.rounds.wait_resumed()
                if self._stopped.is_set():
                    break
                started = self.clock()
                self._guarded_round()
                self._record_round(started)
                self._wait_for_next_round(started)
            settle_timeout = self.config.publish_timeout + _ERROR_BACKOFF_SECONDS
            self.rounds.publisher.settle(settle_timeout, epoch=epoch)
        except ShardFenced as exc:
            logger.warning(
                "shard %s fenced: %s", shard, exc, extra={"shard": shard, "action": "fenced"}
            )
            self.on_fenced(self)
        finally:
            self.rounds.forget()
            self._sweeper.forget()
            metrics.SHARD_FAILING.labels(self._shard_label).set(0)
            connections.close_all()  # this thread's: the shard's and the control database's

    def _acquire_lease(self) -> int | None:
        """Take the shard's lease, and make due again what older owners left claimed."""
        while not self._stopped.is_set():
            try:
                epoch = self.store.acquire_lease(owner=self.owner)
                reset = self.store.reset_older_dispatches(epoch=epoch)
                if reset:
                    logger.info(
                        "shard %s: %d jobs an earlier owner claimed are due again",
                        self.store.shard_id,
                        reset,
                        extra={"shard": self.store.shard_id, "action": "takeover"},
                    )
                self._round_worked()
                return epoch
            except DatabaseError as exc:
                logger.warning("shard %s: cannot take the lease yet: %s", self.store.shard_id, exc)
                self._round_failed()
        return None

    def _round_worked(self) -> None:
        if self._failing_since is not None:
            logger.info(
                "shard %s: dispatching again after %.1f s of errors",
                self.store.shard_id,
                self.failing_for(),
                extra={"shard": self.store.shard_id, "action": "recovered"},
            )
            self._failing_since = None
            metrics.SHARD_FAILING.labels(self._shard_label).set(0)

    def _round_failed(self) -> None:
        """After a database error: drop every connection this thread holds, count the time,
        wait ``_ERROR_BACKOFF_SECONDS``.

        Django replaces a broken connection only at request boundaries, and this thread has
        none; a connection the server ended (a restart, a failover, pg_terminate_backend)
        would fail every later round. The control database's (users' weights) goes too: the
        error may have come from it, and a healthy one is cheap to open again.
        """
        connections.close_all()
        if self._failing_since is None:
            self._failing_since = self.clock()
        metrics.SHARD_FAILING.labels(self._shard_label).set(1)
        self._stopped.wait(_ERROR_BACKOFF_SECONDS)

    def _record_round(self, now: float) -> None:
        """Write when this shard last had a round (the admin's cluster page shows it)."""
        if now < self._next_round_record:
            return
        self._next_round_record = now + ROUND_RECORD_INTERVAL
        try:
            self.store.record_round(epoch=self.rounds.epoch)
        except DatabaseError as exc:  # the next round's own queries report the database
            logger.debug("shard %s: cannot record the round: %s", self.store.shard_id, exc)

    def _wait_for_next_round(self, started: float) -> None:
        """Until ``poll_interval`` after the last round started, so that a job newly due
        waits about one interval at most; or, if the API says jobs are due now, until
        ``WOKEN_ROUND_GAP`` after it (``ShardStore.wait_for_jobs_due_now``). A database
        error here is left for the next round to report."""
        until = started + self.config.poll_interval
        with contextlib.suppress(DatabaseError):
            while (left := until - self.clock()) > 0 and not self._stopped.is_set():
                if self.store.wait_for_jobs_due_now(min(left, _STOP_CHECK_SECONDS)):
                    until = min(until, started + WOKEN_ROUND_GAP)
                    break
        self._stopped.wait(max(0.0, until - self.clock()))

    def _guarded_round(self) -> None:
        """One round; database and broker trouble is logged and retried, fencing is not."""
        try:
            self.store.listen_for_jobs_due_now()  # a new connection's first round
            if self._sweeper.is_due():
                self._sweeper.sweep(epoch=self.rounds.epoch)
            self.rounds.dispatch_round()
        except ShardFenced:
            raise
        except (DatabaseError, MessagesNotAcknowledged) as exc:
            logger.warning("shard %s: round failed, retrying: %s", self.store.shard_id, exc)
            self._round_failed()
        except Exception:
            # The producer raised instead of reporting (a fatal error), or a bug: the thread
            # must not end while the worker still owns the shard, or nobody dispatches it.
            # Jobs this round claimed stay queued until the sweeper makes them due again.
            logger.exception("shard %s: dispatch round failed, retrying", self.store.shard_id)
            self._round_failed()
        else:
            # While the broker refuses (it failed the last messages and acknowledged none
            # since), a round that sent its messages is not one that worked. Counted as one,
            # the rounds between two failed reports would end every run of failures before
            # the step-back's.
            if not self.rounds.publisher.refused():
                self._round_worked()
