"""The recorder keeps outcomes a shard could not take, and tells how long the shard has
failed from when the failed write began."""

from __future__ import annotations

from django.db import OperationalError

from executor_worker.claims import Outcome
from executor_worker.jobs import HeldJob, JobState
from executor_worker.recorder import Recorder
from executor_worker.shard_backoff import ShardBackoff
from jobsvc.messaging.job_message import JobMessage
from tests.fake_clock import FakeClock
from tests.unit.job_messages import attempt_of, received_job

HUNG_FOR = 6.0  # seconds a write waits on a cut connection before it fails


class HangingStore:
    """A shard whose writes hang until a timeout, then fail."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def record(self, outcomes) -> None:
        self.clock.now += HUNG_FOR
        raise OperationalError("consuming input failed: server closed the connection")


def test_a_write_that_hung_until_it_failed_counts_as_failing_from_when_it_began():
    clock = FakeClock(100.0)
    shards = ShardBackoff(first_delay=0.2, max_delay=5.0, clock=clock)
    failures: list[tuple] = []

    def shard_failed(shard_id, action, exc, *, started_at=None):
        failures.append((shard_id, action))
        shards.failed(shard_id, started_at=started_at)

    recorder = Recorder(
        stores=lambda shard_id: HangingStore(clock),
        shards=shards,
        dead_letters=ShardBackoff(first_delay=0.2, max_delay=5.0, clock=clock),
        producer=None,
        dead_letter_topic="dead",
        publish_timeout=1.0,
        idle_transaction_limit=0.0,
        on_shard_failed=shard_failed,
    )
    received = received_job(1)
    job = HeldJob(message=JobMessage.decode(received.value), received=received, inline=True)
    recorder.add([(job, Outcome(attempt=attempt_of(job.message), succeeded=True))])

    assert recorder.record() == []

    assert failures == [(job.shard_id, "record")]
    assert shards.failing_for() == {job.shard_id: HUNG_FOR}
    assert len(recorder) == 1 and job.state is JobState.RECORDING  # kept, to write again
