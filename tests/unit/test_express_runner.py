"""The executor's express runner, with an in-memory consumer and claim: no servers.

What users feel from these: a light user's due job from the express topic is started by
the runner the moment it is read, whatever the executor's loop is busy with; everything
the runner cannot start is handed to the loop, never lost or acknowledged unrun; and what
it starts is charged to the user's share.
"""

from __future__ import annotations

import threading

import pytest
from django.db import OperationalError

from executor_worker.consumer import Received
from executor_worker.express_runner import ExpressRunner, Ran
from jobsvc.messaging.job_message import JobMessage
from tests.unit.job_messages import next_offset, outcome_of, received_job

pytestmark = pytest.mark.unit


def express_message(user: int, *, shard: int = 0, handler: str = "noop", due_in=-0.1, weight=1.0):
    return received_job(
        user, shard=shard, handler=handler, due_in=due_in, weight=weight, topic="express"
    )


class Topic:
    """The express consumer: messages put are handed to the next poll."""

    def __init__(self) -> None:
        self.messages: list[Received] = []
        self.acknowledged: list[Received] = []
        self.arrived = threading.Event()

    def put(self, *messages: Received) -> None:
        self.messages.extend(messages)
        self.arrived.set()

    def poll_batch(self, *, max_messages: int, timeout: float) -> list[Received]:
        self.arrived.wait(timeout)
        self.arrived.clear()
        batch, self.messages = self.messages[:max_messages], self.messages[max_messages:]
        return batch

    def handled(self, *received: Received) -> None:
        self.acknowledged.extend(received)


class Shards:
    """A claim that starts every item (or fails those whose job ids are listed)."""

    def __init__(self) -> None:
        self.claims: list[tuple[int, list[int]]] = []  # (shard, users) per claim
        self.failing_jobs: set[str] = set()
        self.stale_jobs: set[str] = set()
        self.broken = False
        self.claimed = threading.Event()

    def run_inline(self, shard_id: int, items) -> Ran:
        if self.broken:
            raise OperationalError("server closed the connection unexpectedly")
        self.claims.append((shard_id, [message.user_id for message, _ in items]))
        ran = Ran()
        for message, received in items:
            if message.job_id in self.stale_jobs:
                ran.not_run.append(received)
            elif message.job_id in self.failing_jobs:
                ran.failed.append((outcome_of(message, succeeded=False), received))
            else:
                ran.succeeded.append((outcome_of(message), received))
        self.claimed.set()
        return ran


def runner_for(topic: Topic, shards: Shards, *, closed_shards=()) -> ExpressRunner:
    return ExpressRunner(
        consumer=topic,
        run_inline=shards.run_inline,
        inline_handlers=["noop"],
        shard_is_open=lambda shard: shard not in closed_shards,
        batch_size=100,
    )


def test_due_inline_jobs_are_run_acknowledged_and_charged_to_their_users():
    topic, shards = Topic(), Shards()
    runner = runner_for(topic, shards)
    batch = [express_message(1, shard=0), express_message(1, shard=0, weight=2.0)]
    batch += [express_message(2, shard=3)]
    runner.run(batch)
    assert sorted(shards.claims) == [(0, [1, 1]), (3, [2])]  # one claim per shard
    assert topic.acknowledged == batch[:2] + batch[2:]
    handover = runner.take_handover()
    assert handover.messages == [] and handover.to_record == []
    assert handover.started == {1: (2.0, 2), 2: (1.0, 1)}  # the latest weight counts
    assert runner.take_handover().started == {}  # taken once


def test_what_the_runner_cannot_start_is_handed_to_the_loop_unacknowledged():
    topic, shards = Topic(), Shards()
    runner = runner_for(topic, shards, closed_shards={2})
    later = express_message(1, due_in=30.0)  # dispatched ahead: the loop holds it
    webhook = express_message(1, handler="http")  # needs a handler thread
    backing_off = express_message(1, shard=2)  # its shard failed in the loop lately
    garbage = Received(partition=0, offset=next_offset(), value=b"{not json", topic="x")
    runner.run([later, webhook, backing_off, garbage])
    assert shards.claims == []
    assert topic.acknowledged == []
    assert runner.take_handover().messages == [later, webhook, backing_off, garbage]


def test_failed_attempts_go_to_the_loop_to_record_and_are_charged():
    topic, shards = Topic(), Shards()
    runner = runner_for(topic, shards)
    ok, failing, stale = (express_message(user) for user in (1, 2, 3))
    shards.failing_jobs.add(JobMessage.decode(failing.value).job_id)
    shards.stale_jobs.add(JobMessage.decode(stale.value).job_id)
    runner.run([ok, failing, stale])
    assert topic.acknowledged == [ok]
    handover = runner.take_handover()
    assert [received for _, received in handover.to_record] == [failing]
    assert handover.messages == [stale]  # the loop tries it and drops it if stale
    assert handover.started == {1: (1.0, 1), 2: (1.0, 1)}


def test_a_claim_that_fails_leaves_every_message_to_the_loop():
    topic, shards = Topic(), Shards()
    shards.broken = True
    runner = runner_for(topic, shards)
    batch = [express_message(1), express_message(2)]
    runner.run(batch)
    assert topic.acknowledged == []
    handover = runner.take_handover()
    assert handover.messages == batch and handover.started == {}


def test_the_thread_runs_a_job_as_it_arrives_and_stops_when_asked():
    topic, shards = Topic(), Shards()
    runner = runner_for(topic, shards)
    runner.start()
    try:
        job = express_message(7)
        topic.put(job)
        assert shards.claimed.wait(5.0), "the express job was not claimed"
    finally:
        assert runner.stop(timeout=5.0), "the thread did not stop"
    assert topic.acknowledged == [job]


def test_the_loop_s_acknowledgements_are_stored_by_the_runner_s_thread():
    """A confluent-kafka consumer's store_offsets waits out a poll on another thread, and
    the runner's thread polls all the time: the loop must never call the consumer."""
    topic, shards = Topic(), Shards()
    topic.handled_on = []
    handled = topic.handled

    def handled_on_thread(*received):
        topic.handled_on.append(threading.current_thread().name)
        handled(*received)

    topic.handled = handled_on_thread
    runner = runner_for(topic, shards)
    webhook = express_message(1, handler="http")
    runner.start()
    try:
        runner.acknowledge(webhook)  # the loop ran it
        deadline = threading.Event()
        for _ in range(50):
            if topic.acknowledged:
                break
            deadline.wait(0.1)
    finally:
        assert runner.stop(timeout=5.0)
    assert topic.acknowledged == [webhook]
    assert topic.handled_on == ["express"]
    later = express_message(2, handler="http")
    runner.acknowledge(later)  # stopped: the caller's thread is the only one left
    assert topic.acknowledged == [webhook, later]
