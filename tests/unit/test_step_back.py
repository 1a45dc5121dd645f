"""An executor leaves the consumer group for a shard it cannot reach while another member
reaches it, and joins again once no member can take that shard, or after its time out."""

from __future__ import annotations

from collections.abc import Iterable

from coordination.executors import ExecutorRecord
from executor_worker.shard_backoff import ShardBackoff
from executor_worker.step_back import StepBack
from tests.fake_clock import FakeClock

SHARD = 2


class FakePeers:
    """The other executors' records as a registration would have read them."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.reachable_here: frozenset[int] = frozenset()
        self.records: list[ExecutorRecord] | None = None
        self.read_at = clock.now

    def read(self, *records: ExecutorRecord) -> None:
        self.records = list(records)
        self.read_at = self.clock.now

    def shards_reachable(self, shards: Iterable[int]) -> None:
        self.reachable_here = frozenset(shards)

    def peers(self) -> tuple[float, list[ExecutorRecord]] | None:
        return None if self.records is None else (self.read_at, self.records)


def executor(name: str, *, partitions=(0, 1), reaches=(0, 1, 2, 3)) -> ExecutorRecord:
    return ExecutorRecord(
        worker_id=name,
        host="h",
        pid=1,
        started=None,
        partitions=list(partitions),
        reachable_shards=list(reaches),
    )


def setup(after: float = 3.0, seconds: float = 30.0):
    clock = FakeClock(100.0)
    shards = ShardBackoff(first_delay=0.2, max_delay=5.0, clock=clock)
    peers = FakePeers(clock)
    step_back = StepBack(peers=peers, shards=shards, after=after, seconds=seconds, clock=clock)
    return clock, shards, peers, step_back


def cut_off(clock: FakeClock, shards: ShardBackoff, seconds: float) -> None:
    """The shard has failed here for ``seconds``."""
    shards.failed(SHARD, started_at=clock.now - seconds)


def next_read(clock: FakeClock, peers: FakePeers, *records: ExecutorRecord) -> None:
    """A second later, the registration has read the others' records again."""
    clock.now += 1.0
    peers.read(*records)


def leave(clock, shards, peers, step_back) -> None:
    cut_off(clock, shards, 3.0)
    peers.read(executor("b"))
    assert step_back.should_leave()
    assert step_back.out


def test_it_tells_the_others_which_shards_it_reached():
    clock, shards, peers, step_back = setup()
    shards.succeeded(0)
    shards.succeeded(1)
    cut_off(clock, shards, 1.0)

    step_back.should_leave()

    assert peers.reachable_here == {0, 1}


def test_it_leaves_once_the_shard_failed_long_enough_while_another_member_reaches_it():
    clock, shards, peers, step_back = setup(after=3.0)
    peers.read(executor("b"))
    cut_off(clock, shards, 2.0)
    assert not step_back.should_leave()

    next_read(clock, peers, executor("b"))  # the next check

    assert step_back.should_leave()
    assert step_back.out


def test_it_stays_when_no_member_both_holds_partitions_and_reaches_the_shard():
    clock, shards, peers, step_back = setup()
    cut_off(clock, shards, 5.0)
    peers.read(executor("idle", partitions=()), executor("cut-too", reaches=(0, 1)))

    assert not step_back.should_leave()


def test_it_stays_when_the_records_are_old_or_missing():
    clock, shards, peers, step_back = setup()
    cut_off(clock, shards, 5.0)
    assert not step_back.should_leave()  # never read

    peers.read(executor("b"))
    clock.now += 60.0
    cut_off(clock, shards, 5.0)

    assert not step_back.should_leave()


def test_it_never_leaves_without_records_of_the_others_or_with_after_zero():
    clock = FakeClock(100.0)
    shards = ShardBackoff(first_delay=0.2, max_delay=5.0, clock=clock)
    cut_off(clock, shards, 60.0)
    alone = StepBack(peers=None, shards=shards, after=3.0, seconds=30.0, clock=clock)
    peers = FakePeers(clock)
    peers.read(executor("b"))
    never = StepBack(peers=peers, shards=shards, after=0.0, seconds=30.0, clock=clock)

    assert not alone.should_leave()
    assert not never.should_leave()


def test_out_of_the_group_it_joins_again_after_its_time_while_the_other_can_take_the_shard():
    clock, shards, peers, step_back = setup(seconds=30.0)
    leave(clock, shards, peers, step_back)

    for _ in range(29):
        next_read(clock, peers, executor("b"))
        assert not step_back.should_rejoin()
    clock.now += 1.0

    assert step_back.should_rejoin()
    assert not step_back.out


def test_it_joins_again_early_when_two_reads_in_a_row_show_nobody_able_to_take_the_shard():
    clock, shards, peers, step_back = setup(seconds=30.0)
    leave(clock, shards, peers, step_back)
    # b lost its partitions: cut off from the broker
    next_read(clock, peers, executor("b", partitions=()))
    assert not step_back.should_rejoin()  # one read: b may be between two assignments
    assert not step_back.should_rejoin()  # the same read again is not a second one

    next_read(clock, peers, executor("b", partitions=()))

    assert step_back.should_rejoin()
    assert not step_back.out


def test_a_member_given_partitions_again_between_two_reads_keeps_it_out():
    clock, shards, peers, step_back = setup(seconds=30.0)
    leave(clock, shards, peers, step_back)
    next_read(clock, peers, executor("b", partitions=()))  # mid-rebalance
    assert not step_back.should_rejoin()
    next_read(clock, peers, executor("b"))
    assert not step_back.should_rejoin()
    next_read(clock, peers, executor("b", partitions=()))

    assert not step_back.should_rejoin()  # the first of a new pair of reads


def test_it_joins_again_early_when_the_member_it_left_for_is_gone():
    clock, shards, peers, step_back = setup(seconds=30.0)
    leave(clock, shards, peers, step_back)
    next_read(clock, peers)  # b's node went with its ZooKeeper session: it died
    assert not step_back.should_rejoin()
    next_read(clock, peers)

    assert step_back.should_rejoin()


def test_without_fresh_records_it_waits_out_its_time():
    clock, shards, peers, step_back = setup(seconds=30.0)
    leave(clock, shards, peers, step_back)
    clock.now += 15.0  # nothing read since it left: ZooKeeper is out of reach

    assert not step_back.should_rejoin()
    clock.now += 15.0
    assert step_back.should_rejoin()


def test_it_joins_again_once_the_shards_it_left_for_answer_again():
    clock, shards, peers, step_back = setup(seconds=30.0)
    leave(clock, shards, peers, step_back)
    next_read(clock, peers, executor("b"))
    assert not step_back.should_rejoin()

    shards.succeeded(SHARD)  # a probe from out of the group: the cut has healed

    assert step_back.should_rejoin()


def test_joined_again_while_the_shard_still_fails_it_leaves_again_at_its_next_look():
    clock, shards, peers, step_back = setup(seconds=30.0)
    leave(clock, shards, peers, step_back)
    clock.now += 30.0
    peers.read(executor("b"))
    assert step_back.should_rejoin()

    assert step_back.should_leave()


def test_another_shard_still_failing_keeps_it_out_when_the_one_it_left_for_answers():
    clock, shards, peers, step_back = setup(seconds=30.0)
    leave(clock, shards, peers, step_back)
    other = SHARD + 1
    shards.failed(other, started_at=clock.now - 3.0)  # failed too: same server, say
    next_read(clock, peers, executor("b"))

    shards.succeeded(SHARD)
    assert not step_back.should_rejoin()
    shards.succeeded(other)
    assert step_back.should_rejoin()
