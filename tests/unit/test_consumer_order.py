"""A partition's messages must arrive with contiguous offsets, or the hole is read again.

The jobs topic has no compaction and no transactional producers, so every offset holds a
job message; a consumer that skipped one would leave that job queued until the
scheduler's sweeper dispatched it again, a minute later.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from executor_worker.consumer import HOLE_REREADS, Delivery, _PartitionOrder


def _arrivals(order: _PartitionOrder, *offsets: int) -> list[Delivery]:
    return [order.arrive(offset) for offset in offsets]


def test_offsets_in_order_are_all_handled():
    assert _arrivals(_PartitionOrder(), 7, 8, 9) == [Delivery.NEXT] * 3


def test_the_first_offset_after_an_assignment_may_be_anything():
    order = _PartitionOrder()

    assert order.arrive(4_000) is Delivery.NEXT
    assert order.expected == 4_001


def test_a_skipped_offset_asks_for_a_reread_from_the_hole():
    order = _PartitionOrder()
    order.arrive(10)

    assert order.arrive(13) is Delivery.HOLE
    assert order.expected == 11  # where the consumer seeks back to


def test_the_reread_fills_the_hole_and_the_messages_after_it_come_again():
    order = _PartitionOrder()
    _arrivals(order, 10, 13)

    assert _arrivals(order, 11, 12, 13, 14) == [Delivery.NEXT] * 4


def test_messages_delivered_before_a_seek_are_not_handled_twice():
    order = _PartitionOrder()
    _arrivals(order, 10, 13)  # a hole: the consumer seeks back to 11
    _arrivals(order, 11, 12, 13)

    # Copies of what the read before the seek had fetched.
    assert _arrivals(order, 12, 13, 14) == [Delivery.REPEATED, Delivery.REPEATED, Delivery.NEXT]


def test_offsets_that_go_back_without_a_seek_are_a_new_log():
    """The topic was recreated (or the broker lost it): the consumer's position was out of
    range and reset to the new log's start. Those are new messages, not repeats."""
    order = _PartitionOrder()
    _arrivals(order, 500, 501, 502)

    assert order.arrive(0) is Delivery.RESET
    assert _arrivals(order, 1, 2) == [Delivery.NEXT, Delivery.NEXT]
    assert order.expected == 3


def test_a_new_log_below_an_earlier_reread_is_still_a_new_log():
    order = _PartitionOrder()
    _arrivals(order, 10, 13, 11, 12, 13)  # re-read from 11

    assert order.arrive(0) is Delivery.RESET


def test_a_hole_that_never_fills_is_accepted_after_the_rereads():
    order = _PartitionOrder()
    order.arrive(10)

    assert _arrivals(order, *[13] * HOLE_REREADS) == [Delivery.HOLE] * HOLE_REREADS
    assert order.arrive(13) is Delivery.NEXT
    assert order.expected == 14


def test_each_new_hole_gets_its_own_rereads():
    order = _PartitionOrder(rereads=1)
    _arrivals(order, 10, 12, 12)  # the hole at 11 is accepted after one re-read

    assert order.arrive(14) is Delivery.HOLE


@given(st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=200))
def test_handled_offsets_only_ever_increase_within_one_log(arrivals):
    order = _PartitionOrder()
    logs: list[list[int]] = [[]]
    for offset in arrivals:
        delivery = order.arrive(offset)
        if delivery is Delivery.RESET:
            logs.append([offset])
        elif delivery is Delivery.NEXT:
            logs[-1].append(offset)

    assert all(handled == sorted(set(handled)) for handled in logs)
