"""A partition's offsets may be committed only up to its contiguous handled prefix.

Jobs finish out of order; committing past an offset whose job is still running would
lose that job if the executor died (the message would never be delivered again).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from executor_worker.consumer import _PartitionProgress


def _received(*offsets: int) -> _PartitionProgress:
    progress = _PartitionProgress()
    for offset in offsets:
        progress.receive(offset)
    return progress


def test_handling_messages_in_order_commits_after_each():
    progress = _received(10, 11, 12)

    assert progress.handle(10) == 11
    assert progress.handle(11) == 12
    assert progress.handle(12) == 13


def test_a_later_message_handled_first_commits_nothing():
    progress = _received(10, 11, 12)

    assert progress.handle(12) is None
    assert progress.handle(11) is None


def test_filling_the_gap_commits_the_whole_handled_prefix():
    progress = _received(10, 11, 12, 13)
    progress.handle(11)
    progress.handle(12)

    assert progress.handle(10) == 13
    assert progress.handle(13) == 14


def test_the_prefix_stops_at_the_first_unhandled_message():
    progress = _received(10, 11, 12, 13)
    progress.handle(11)
    progress.handle(13)

    assert progress.handle(10) == 12
    assert progress.handle(12) == 14


def test_offsets_need_not_be_consecutive():
    """Compacted topics and transaction markers leave gaps between offsets."""
    progress = _received(5, 9, 20)
    progress.handle(9)

    assert progress.handle(5) == 10
    assert progress.handle(20) == 21


def test_handling_a_message_twice_does_not_move_the_commit_point_again():
    progress = _received(1, 2)
    assert progress.handle(1) == 2

    assert progress.handle(1) is None
    assert progress.handle(2) == 3


def test_committed_offsets_are_forgotten():
    progress = _received(*range(100))
    for offset in reversed(range(100)):
        progress.handle(offset)

    assert not progress.outstanding
    assert not progress.handled


@given(st.permutations(range(30)))
def test_any_handling_order_commits_exactly_the_contiguous_prefix(order):
    progress = _received(*range(30))
    handled: set[int] = set()
    committed = 0
    for offset in order:
        handled.add(offset)
        commit_from = progress.handle(offset)
        prefix = next(n for n in range(31) if n not in handled)
        if commit_from is not None:
            assert commit_from > committed  # it only moves forward
            committed = commit_from
        assert committed == prefix
    assert committed == 30
