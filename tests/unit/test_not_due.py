"""Messages read ahead of their due time are let go when due, never before."""

from __future__ import annotations

from executor_worker.not_due import NotDueYet


def test_nothing_is_released_before_its_due_time():
    held = NotDueYet()
    held.put(10.0, "a")

    assert held.release(9.999) == []
    assert len(held) == 1
    assert held.release(10.0) == ["a"]
    assert len(held) == 0


def test_what_is_due_comes_out_earliest_first_whatever_the_order_it_arrived_in():
    held = NotDueYet()
    for due, item in [(5.0, "late"), (1.0, "early"), (3.0, "middle"), (9.0, "not yet")]:
        held.put(due, item)

    assert held.release(6.0) == ["early", "middle", "late"]
    assert held.next_due() == 9.0


def test_items_due_at_the_same_moment_keep_their_arrival_order():
    held = NotDueYet()
    for item in ["first", "second", "third"]:
        held.put(2.0, item)

    assert held.release(2.0) == ["first", "second", "third"]


def test_next_due_is_the_earliest_held_time_and_none_when_empty():
    held = NotDueYet()
    assert held.next_due() is None
    held.put(7.0, "x")
    held.put(4.0, "y")

    assert held.next_due() == 4.0
    held.release(4.0)
    assert held.next_due() == 7.0


def test_clear_gives_back_everything_held():
    held = NotDueYet()
    held.put(1.0, "a")
    held.put(2.0, "b")

    assert sorted(held.clear()) == ["a", "b"]
    assert len(held) == 0
    assert held.release(100.0) == []
