"""The executor's parts that need no server: the intake (decoding, holding jobs until due
by the shard's clock), the handler pool (threads, deadlines), and the shard clocks."""

from __future__ import annotations

import threading
import time

import pytest

from executor_worker.claims import Attempt, Outcome
from executor_worker.handler_pool import HandlerPool
from executor_worker.intake import Intake
from executor_worker.jobs import HeldJob, JobState
from executor_worker.shard_clocks import ShardClocks
from jobsvc.messaging.job_message import JobMessage
from tests.unit.job_messages import attempt_of, received_job
from tests.waiting import wait_until


class FakeConsumer:
    """The part of JobConsumer the intake uses; what was acknowledged is kept."""

    def __init__(self, batches=()) -> None:
        self.batches = list(batches)
        self.acknowledged: list = []
        self.paused = False

    def poll_batch(self, *, max_messages: int, timeout: float):
        self.on_poll(timeout)
        return self.batches.pop(0)[:max_messages] if self.batches else []

    def on_poll(self, timeout: float) -> None:
        """What happens while a poll waits (nothing here)."""

    def handled(self, *received) -> None:
        self.acknowledged += received

    def pause_all(self, paused: bool) -> None:
        self.paused = paused


def intake_of(consumer: FakeConsumer, *, offset: float = 0.0, clock=time.time) -> Intake:
    """An intake whose shards' clocks run ``offset`` seconds ahead of this machine's."""
    return Intake(
        consumer=consumer,
        batch_size=100,
        inline_handlers=["noop"],
        due_time=lambda message: message.due_at.timestamp() - offset,
        clock=clock,
    )


def test_due_jobs_come_out_at_once_and_others_when_due():
    due, later = received_job(1, due_in=-1.0), received_job(2, due_in=30.0)
    now = [time.time()]
    intake = intake_of(FakeConsumer([[due, later]]), clock=lambda: now[0])

    jobs = intake.read(room=10, timeout=0)
    assert [job.received for job in jobs] == [due]
    assert len(intake) == 1
    now[0] += 29
    assert intake.read(room=10, timeout=0) == []
    now[0] += 2
    (released,) = intake.read(room=10, timeout=0)
    assert released.received is later and released.state is JobState.WAITING


def test_a_held_job_that_comes_due_while_a_poll_waits_comes_out_of_that_read():
    now = [time.time()]

    class WaitingConsumer(FakeConsumer):
        def on_poll(self, timeout: float) -> None:
            now[0] += timeout  # the poll waited its whole timeout: no message came

    job = received_job(1, due_in=0.5)
    intake = intake_of(WaitingConsumer([[job]]), clock=lambda: now[0])
    assert intake.read(room=10, timeout=0) == []
    (released,) = intake.read(room=10, timeout=intake.next_due() - now[0])
    assert released.received is job


def test_a_job_is_held_by_the_shards_clock_not_this_machines():
    # This machine's clock runs 3 s ahead of the database's: a job due in 2 s by the
    # database is not due yet, whatever our clock says.
    job = received_job(1, due_in=-1.0)  # due a second ago by our clock
    intake = intake_of(FakeConsumer([[job]]), offset=-3.0)
    assert intake.read(room=10, timeout=0) == []
    assert intake.next_due() == pytest.approx(time.time() + 2, abs=0.5)


def test_a_malformed_message_is_acknowledged_and_never_handed_on():
    good = received_job(1)
    bad = received_job(1)
    bad = type(bad)(partition=0, offset=bad.offset, value=b"not json")
    consumer = FakeConsumer([[bad, good]])
    jobs = intake_of(consumer).read(room=10, timeout=0)
    assert [job.received for job in jobs] == [good]
    assert consumer.acknowledged == [bad]


def test_reading_pauses_while_the_read_ahead_is_full():
    consumer = FakeConsumer([[received_job(1)]])
    intake = intake_of(consumer)
    assert intake.read(room=0, timeout=0) == []
    assert consumer.paused
    intake.read(room=5, timeout=0)
    assert not consumer.paused


def test_inline_handlers_mark_their_jobs_inline():
    consumer = FakeConsumer([[received_job(1), received_job(1, handler="http")]])
    jobs = intake_of(consumer).read(room=10, timeout=0)
    assert [job.inline for job in jobs] == [True, False]


class BlockingRunner:
    """Runs attempts on the pool's threads; each waits until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started: list[Attempt] = []

    def run(self, attempt: Attempt, *, started: float) -> Outcome:
        self.started.append(attempt)
        self.release.wait(5)
        return Outcome(attempt=attempt, succeeded=True)

    def failed(self, attempt: Attempt, error: BaseException) -> Outcome:
        return Outcome(attempt=attempt, succeeded=False, error=str(error), retry_delay=1.0)


def _held(received) -> HeldJob:
    return HeldJob(message=JobMessage.decode(received.value), received=received, inline=False)


def test_a_pool_runs_as_many_attempts_as_threads_and_gives_up_one_past_its_deadline():
    runner, now = BlockingRunner(), [0.0]
    pool = HandlerPool(concurrency=2, runner=runner, clock=lambda: now[0])
    slow, fast = _held(received_job(1)), _held(received_job(1))
    pool.start(slow, attempt_of(slow.message, timeout=10.0))
    pool.start(fast, attempt_of(fast.message, timeout=100.0))
    assert pool.idle() == 0
    assert pool.running() == {0: [slow.key, fast.key]}

    wait_until(lambda: len(runner.started) == 2, timeout=5, what="the handlers started")
    assert not pool.collect()  # their deadlines are known now: 10 s and 100 s from 0
    now[0] = 11.0
    (timed_out,) = pool.collect()
    assert timed_out[0] is slow and "timed out" in timed_out[1].error
    runner.release.set()
    pool.shutdown()
    done: list = []
    wait_until(lambda: done.extend(pool.collect()) or pool.idle() == 2, timeout=5, what="both")
    assert [job for job, _ in done] == [fast]  # the late success of the given-up one is not
    assert pool.idle() == 2


def test_a_shards_offset_is_the_one_measured_with_the_shortest_round_trip():
    readings = iter([(105.0, 0.4), (103.0, 0.1), (108.0, 1.0)])  # (database, round trip)
    clock = [100.0]

    def read(shard: int) -> float:
        database, round_trip = next(readings)
        clock[0] += round_trip
        return database + round_trip / 2

    clocks = ShardClocks(
        read_database_clock=read, interval=0, max_offset=1.0, clock=lambda: clock[0]
    )
    for _ in range(3):
        clock[0] = 100.0
        clocks.measure(0)
    assert clocks.offset(0) == pytest.approx(3.0)
    assert clocks.due_time(0, 1000.0) == pytest.approx(997.0)
    assert clocks.problems() and "shard 0" in clocks.problems()[0]
    assert clocks.offset(1) == 0.0  # not measured: this machine's clock
