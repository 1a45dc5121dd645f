"""The jobs-topic consumer: at-least-once, with offsets committed only for handled messages.

Modelled on confluent-kafka-python's verifiable consumer: ``enable.auto.offset.store`` is
off and an offset is stored only when its message and every earlier one in the partition
are handled (jobs finish out of order, so a per-partition tracker finds the contiguous
handled prefix). Stored offsets are committed every second, synchronously when partitions
are revoked, and before close. A message whose handling was interrupted is delivered
again; the executor's claim drops it if its attempt already ran.

Within a partition, Kafka delivers offsets in increasing order; they may skip (a
compacted or transactional topic leaves gaps), and they are never served out of order.
They can go back only when the partition's log is new: the topic deleted and created
again, or a log truncated after an unclean leader election; the consumer, whose position
is then out of range, resets to the new log's start (``auto.offset.reset``). An offset at
or below the last one delivered is therefore a new log, not a repeat: its commit tracking
starts again (the old log's offsets must never be committed into it).

Memory stays bounded whatever happens downstream: a partition whose uncommitted messages
(received, but behind one not yet handled: a long job, a shard that cannot be reached)
reach ``max_uncommitted`` is paused, and resumed once half of them are committed. The
worker pauses every partition while it holds as many attempts as it may
(``pause_all``). At-least-once forbids committing past an unhandled message, so this is
the only bound there can be: the executor stops reading rather than remember more.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from jobsvc.messaging.client_security import kafka_connection_config, kafka_security_config

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Received:
    partition: int
    offset: int
    value: bytes | None
    log: int = 0  # which of the partition's logs it came from (a new log: see above)


class _PartitionProgress:
    """Offsets received from one partition, in order, and which of them are handled."""

    def __init__(self) -> None:
        self.outstanding: deque[int] = deque()
        self.handled: set[int] = set()

    def receive(self, offset: int) -> None:
        self.outstanding.append(offset)

    def handle(self, offset: int) -> int | None:
        """Mark handled; return the next offset to commit if the handled prefix grew."""
        self.handled.add(offset)
        commit_from = None
        while self.outstanding and self.outstanding[0] in self.handled:
            done = self.outstanding.popleft()
            self.handled.discard(done)
            commit_from = done + 1
        return commit_from


class JobConsumer:
    def __init__(
        self,
        *,
        bootstrap: str,
        group_id: str,
        topic: str,
        client_id: str,
        max_uncommitted: int,
        on_partitions_changed: Callable[[frozenset[int]], None] | None = None,
        kafka_consumer: Consumer | None = None,
    ) -> None:
        """``on_partitions_changed`` is called, on the polling thread, with every partition
        assigned after each rebalance (an empty set once all are revoked, as on close);
        it must not block, and an exception it raises is logged, not raised from poll.
        ``kafka_consumer``: for tests, a stand-in for confluent-kafka's ``Consumer``."""
        self.topic = topic
        self._on_partitions_changed = on_partitions_changed
        self._assigned: set[int] = set()  # as the rebalance callbacks told us
        self.max_uncommitted = max_uncommitted
        self._consumer = kafka_consumer or Consumer(
            {
                "bootstrap.servers": bootstrap,
                **kafka_security_config(),
                **kafka_connection_config(),
                "group.id": group_id,
                # Partition i to the (i mod N)-th of N members: schedulers deal each
                # user's jobs to consecutive partitions in turn, so to every executor
                # (scheduler_worker.partition_deal). Range stays listed second: a member
                # that names only round-robin cannot join a group whose members chose
                # range (older executors in a rolling upgrade: the group coordinator
                # answers INCONSISTENT_GROUP_PROTOCOL to a join whose protocols share none
                # with the group's), and there it still runs jobs.
                "partition.assignment.strategy": "roundrobin,range",
                "client.id": client_id,
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 1000,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                # A member learns that the group rebalances from a heartbeat's answer, so
                # each rebalance waits up to one interval for the members to rejoin; six
                # heartbeats per session, not two, also keep a busy member from timing out.
                "heartbeat.interval.ms": 1000,
                "max.poll.interval.ms": 30000,
                "enable.partition.eof": False,
                # Due jobs should start within milliseconds: do not let a fetch idle long.
                "fetch.wait.max.ms": 20,
            }
        )
        self._progress: defaultdict[int, _PartitionProgress] = defaultdict(_PartitionProgress)
        self._last_offset: dict[int, int] = {}  # per partition: the last one delivered
        self._logs: dict[int, int] = {}  # per partition: how many times its log was new
        self._lock = threading.Lock()
        self._pause_all = False
        self._full: set[int] = set()  # partitions at max_uncommitted
        self._paused: set[int] = set()  # partitions paused in the client now
        self._consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def poll_batch(self, *, max_messages: int, timeout: float) -> list[Received]:
        self._apply_pauses()
        batch: list[Received] = []
        for message in self._fetch(max_messages, timeout):
            error = message.error()
            if error is not None:  # never end-of-partition: enable.partition.eof is off
                logger.warning("consumer error: %s", error)
                continue
            partition, offset = message.partition(), message.offset()
            last = self._last_offset.get(partition)
            if last is not None and offset <= last:
                logger.warning(
                    "partition %s: offset %d after %d: its log is new (recreated or "
                    "truncated); reading it from there",
                    partition,
                    offset,
                    last,
                )
                self._new_log(partition)
            self._last_offset[partition] = offset
            batch.append(Received(partition, offset, message.value(), self._logs.get(partition, 0)))
            with self._lock:
                self._progress[partition].receive(offset)
        return batch

    def _new_log(self, partition: int) -> None:
        """Forget the old log's offsets: its messages still held are handled, never
        committed (their offsets mean nothing in the new log)."""
        with self._lock:
            self._logs[partition] = self._logs.get(partition, 0) + 1
            self._progress.pop(partition, None)
            self._full.discard(partition)

    def handled(self, *received: Received) -> None:
        """These messages' outcomes are durable: their offsets may be committed.

        One call for a whole batch stores each partition's new offset once.
        """
        commits: dict[int, int] = {}
        with self._lock:
            for message in received:
                progress = self._progress.get(message.partition)
                if progress is None or message.log != self._logs.get(message.partition, 0):
                    continue  # revoked meanwhile, or from a log that is gone
                commit_from = progress.handle(message.offset)
                if commit_from is not None:
                    commits[message.partition] = commit_from
        if commits:
            offsets = [TopicPartition(self.topic, p, offset) for p, offset in commits.items()]
            try:
                self._consumer.store_offsets(offsets=offsets)
            except KafkaException as exc:  # a partition was revoked meanwhile
                logger.info("offsets %s not stored: %s", commits, exc)

    def _fetch(self, max_messages: int, timeout: float) -> list:
        """Up to ``max_messages``, as soon as one is there: ``consume`` alone would wait
        out its whole timeout unless the batch filled up."""
        first = self._consumer.poll(timeout)
        if first is None:
            return []
        if max_messages == 1:
            return [first]
        return [first, *self._consumer.consume(num_messages=max_messages - 1, timeout=0)]

    def lag(self) -> dict[int, int]:
        """Messages between our position and each assigned partition's end (cached ends)."""
        lags: dict[int, int] = {}
        try:
            for position in self._consumer.position(self._consumer.assignment()):
                _, high = self._consumer.get_watermark_offsets(position, cached=True)
                if position.offset >= 0 and high >= 0:
                    lags[position.partition] = max(0, high - position.offset)
        except KafkaException as exc:
            logger.debug("lag unavailable: %s", exc)
        return lags

    def pause_all(self, paused: bool) -> None:
        """Stop (or go on) reading every partition; at once, so that the client does not
        fetch ahead for a worker that no longer polls (draining)."""
        if paused != self._pause_all:
            self._pause_all = paused
            self._apply_pauses()

    def _apply_pauses(self) -> None:
        """Pause the partitions that must not be read now; resume the others."""
        with self._lock:
            for partition, progress in self._progress.items():
                held = len(progress.outstanding)
                if held >= self.max_uncommitted and partition not in self._full:
                    logger.warning(
                        "partition %s: %d messages not committable yet; pausing it", partition, held
                    )
                    self._full.add(partition)
                elif held <= self.max_uncommitted // 2 and partition in self._full:
                    logger.info("partition %s: resuming (%d not committable)", partition, held)
                    self._full.discard(partition)
            full = set(self._full)
        if not self._pause_all and not full and not self._paused:
            return
        assigned = {p.partition for p in self._consumer.assignment()}
        wanted = assigned if self._pause_all else full & assigned
        if wanted != self._paused:
            resume, pause = self._paused - wanted, wanted - self._paused
            if resume:
                self._consumer.resume([TopicPartition(self.topic, p) for p in resume])
            if pause:
                self._consumer.pause([TopicPartition(self.topic, p) for p in pause])
            self._paused = wanted

    def commit(self) -> None:
        try:
            self._consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                logger.warning("commit failed: %s", exc)

    def close(self) -> None:
        self.commit()
        self._consumer.close()

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        logger.info("assigned partitions %s of %s", [p.partition for p in partitions], self.topic)
        self._paused = set()  # an assignment starts unpaused; the next poll pauses again
        for partition in partitions:  # reading starts again at the committed offset
            self._last_offset.pop(partition.partition, None)
        self._assignment_changed(added=partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        logger.info("revoking partitions %s of %s", [p.partition for p in partitions], self.topic)
        self.commit()
        for partition in partitions:
            # Messages still held from it are not ours to commit if it comes back.
            self._new_log(partition.partition)
            self._last_offset.pop(partition.partition, None)
        self._paused -= {p.partition for p in partitions}
        self._assignment_changed(removed=partitions)

    def _assignment_changed(
        self, *, added: Sequence[TopicPartition] = (), removed: Sequence[TopicPartition] = ()
    ) -> None:
        """Tell ``on_partitions_changed``: a set kept up to date by both callbacks, so an
        incremental (cooperative) rebalance is reported as well as an eager one."""
        self._assigned |= {p.partition for p in added}
        self._assigned -= {p.partition for p in removed}
        if self._on_partitions_changed is None:
            return
        try:
            self._on_partitions_changed(frozenset(self._assigned))
        except Exception:  # a view of the assignment must never stop the consumer
            logger.exception("on_partitions_changed raised")
