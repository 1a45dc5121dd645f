"""Which users an executor looks for in the shards once it ran out of their jobs."""

from __future__ import annotations

from executor_worker.work_stealing import WorkStealing
from tests.fake_clock import FakeClock

RUN = 32  # jobs in a row that make a backlog


def stealing(clock: FakeClock | None = None, *, max_users: int = 100) -> WorkStealing:
    return WorkStealing(
        backlog_run=RUN, max_users=max_users, interval=0.05, clock=clock or FakeClock()
    )


def test_users_that_ran_dry_after_a_backlog_are_looked_for_heaviest_first_up_to_the_limit():
    looks = stealing(max_users=2)
    looks.ran_dry({"light": (1.0, RUN), "heavy": (4.0, 500), "single": (8.0, 1)})
    looks.ran_dry({"middle": (2.0, RUN + 1)})

    assert looks.users_to_look_for() == {"heavy": 4.0, "middle": 2.0}


def test_looks_are_at_least_an_interval_apart_and_the_users_left_wait_for_the_next():
    clock = FakeClock()
    looks = stealing(clock, max_users=1)
    looks.ran_dry({"a": (2.0, RUN), "b": (1.0, RUN)})
    assert looks.users_to_look_for() == {"a": 2.0}

    clock.now = 0.04
    assert looks.users_to_look_for() == {}
    clock.now = 0.05
    assert looks.users_to_look_for() == {"b": 1.0}
    clock.now = 1.0
    assert looks.users_to_look_for() == {}  # nobody ran dry since


def test_a_user_a_look_found_jobs_for_is_looked_for_again_after_any_run_until_none_are_found():
    clock = FakeClock()
    looks = stealing(clock)
    looks.ran_dry({"a": (1.0, RUN), "b": (1.0, RUN)})
    looked_for = looks.users_to_look_for()
    looks.found(looked_for, found={"a"})

    clock.now = 0.1
    looks.ran_dry({"a": (1.0, 3), "b": (1.0, 3)})  # short runs: the stolen jobs ran out
    assert looks.users_to_look_for() == {"a": 1.0}
    looks.found({"a"}, found=set())

    clock.now = 0.2
    looks.ran_dry({"a": (1.0, 3)})
    assert looks.users_to_look_for() == {}
