"""The express topic's jobs, run the moment they arrive, on a thread of their own.

The express topic carries the first few jobs of users with few in flight on their shard
(scheduler_worker.express_lane): a light user's job due now, published while another
user's flood fills the jobs topic. The executor's loop reads it only between its own
steps, and under a flood each step is a poll of thousands of messages or a claim of a
thousand jobs, a few hundred milliseconds each on a busy machine: such a job waited up to
about two of them, and its claim, before it started (tools/bench light_user_due_now,
dispatched to started up to 560 ms). Here a thread of its own waits on the topic and
claims and runs each due job whose handler runs inline (it never blocks) at once, in one
transaction per shard, beside whatever the loop does.

Everything else it hands over to the loop, which holds it as it holds the jobs topic's
messages: jobs not due yet, jobs whose handler needs a handler thread (the loop owns the
threads), messages it cannot read, jobs it could not start (the loop drops duplicates and
stale attempts), a shard whose claim failed (the loop retries it), and failed attempts to
record (the loop records retries and dead letters). And the jobs it ran are charged to
their users' shares in the loop's fair order (``FairBuffer.charge``): without that, a
user's express jobs came on top of its share.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from django.db import Error as DatabaseError
from django.db import connections

from executor_worker.claims import Outcome
from executor_worker.consumer import JobConsumer, Received
from jobsvc.messaging.job_message import JobMessage, MalformedJobMessage
from jobsvc.sharding.shards import UnknownShard, shard_alias

logger = logging.getLogger(__name__)

# Seconds one poll of the express topic waits: only how soon the thread sees a stop.
_POLL_WAIT = 0.1

_Item = tuple[JobMessage, Received]


@dataclass
class Ran:
    """What a claim of express jobs on one shard did."""

    succeeded: list[tuple[Outcome, Received]] = field(default_factory=list)
    failed: list[tuple[Outcome, Received]] = field(default_factory=list)  # to record
    not_run: list[Received] = field(default_factory=list)  # for the loop to decide


@dataclass
class Handover:
    """What the loop takes from the runner each turn."""

    messages: list[Received] = field(default_factory=list)
    to_record: list[tuple[Outcome, Received]] = field(default_factory=list)
    # Per user: (weight, jobs started here), to charge to its share.
    started: dict[int, tuple[float, int]] = field(default_factory=dict)


class ExpressRunner:
    def __init__(
        self,
        *,
        consumer: JobConsumer,
        run_inline: Callable[[int, list[_Item]], Ran],
        inline_handlers: Collection[str],
        shard_is_open: Callable[[int], bool],
        batch_size: int,
        on_start: Callable[[], object] = lambda: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``run_inline(shard_id, items)`` claims and runs the items' attempts in one
        transaction on the calling thread's connection; it may raise DatabaseError.
        ``on_start`` runs first on the runner's thread (the worker opens that thread's
        database connections there, not for its first jobs)."""
        self.consumer = consumer
        self._run_inline = run_inline
        self._inline_handlers = frozenset(inline_handlers)
        self._shard_is_open = shard_is_open
        self._batch_size = batch_size
        self._on_start = on_start
        self._clock = clock
        self._stopping = threading.Event()
        # Messages and failed attempts for the loop, and {user: (weight, jobs started)}.
        self._outbox: queue.SimpleQueue[
            Received | tuple[Outcome, Received] | dict[int, tuple[float, int]]
        ] = queue.SimpleQueue()
        # Messages the loop handled: the consumer is this thread's (a confluent-kafka
        # consumer's store_offsets waited out another thread's poll, and this thread polls
        # all the time: the loop stopped for 30 s and left the group).
        self._acknowledged: queue.SimpleQueue[tuple[Received, ...]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="express", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> bool:
        """Stop polling and wait for a claim in progress; whether the thread ended."""
        self._stopping.set()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def acknowledge(self, *received: Received) -> None:
        """The loop handled these messages of the express topic: the runner's thread lets
        the consumer commit them (``JobConsumer.handled``), or this one once it stopped."""
        if not received:
            return
        if self._thread.is_alive():
            self._acknowledged.put(received)
        else:
            self.consumer.handled(*received)

    def take_handover(self) -> Handover:
        """Everything handed over since the last call (the loop's thread)."""
        handover = Handover()
        while True:
            try:
                entry = self._outbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(entry, Received):
                handover.messages.append(entry)
            elif isinstance(entry, dict):
                for user, (weight, count) in entry.items():
                    earlier = handover.started.get(user, (weight, 0))[1]
                    handover.started[user] = (weight, earlier + count)
            else:
                handover.to_record.append(entry)
        return handover

    def _loop(self) -> None:
        try:
            self._on_start()
            while not self._stopping.is_set():
                self._store_acknowledged()
                batch = self.consumer.poll_batch(max_messages=self._batch_size, timeout=_POLL_WAIT)
                if batch:
                    self.run(batch)
        except Exception:  # the loop gets what was read; this thread must not die quietly
            logger.exception("express runner stopped")
        finally:
            self._store_acknowledged()
            connections.close_all()  # this thread's own

    def _store_acknowledged(self) -> None:
        handled: list[Received] = []
        while True:
            try:
                handled.extend(self._acknowledged.get_nowait())
            except queue.Empty:
                break
        if handled:
            self.consumer.handled(*handled)

    def run(self, batch: list[Received]) -> None:
        """Run what of ``batch`` can run here; hand the rest over (see the module)."""
        by_shard: dict[int, list[_Item]] = {}
        for received in batch:
            message = self._runnable(received)
            if message is None:
                self._outbox.put(received)
            else:
                by_shard.setdefault(message.shard_id, []).append((message, received))
        for shard_id, items in by_shard.items():
            try:
                ran = self._run_inline(shard_id, items)
            except DatabaseError as exc:
                logger.info("shard %s: express claim failed, left to the loop: %s", shard_id, exc)
                with contextlib.suppress(DatabaseError):  # broken: closed is what we want
                    connections[shard_alias(shard_id)].close()
                for _, received in items:
                    self._outbox.put(received)
                continue
            self.consumer.handled(*(received for _, received in ran.succeeded))
            for result in ran.failed:
                self._outbox.put(result)
            for received in ran.not_run:
                self._outbox.put(received)
            weights = {message.user_id: message.weight for message, _ in items}
            started = Counter(
                outcome.attempt.user_id for outcome, _ in (*ran.succeeded, *ran.failed)
            )
            if started:
                self._outbox.put({user: (weights[user], n) for user, n in started.items()})

    def _runnable(self, received: Received) -> JobMessage | None:
        """The message, if its job is due and runs inline on a shard that works."""
        try:
            message = JobMessage.decode(received.value)
            shard_alias(message.shard_id)
        except (MalformedJobMessage, UnknownShard):
            return None  # the loop logs and drops it
        if message.handler not in self._inline_handlers:
            return None
        if message.due_at.timestamp() > self._clock():
            return None
        if not self._shard_is_open(message.shard_id):
            return None
        return message
