"""Per-user control-database reads of the executors survive a cut session or a restart."""

from __future__ import annotations

import pytest
from django.db import OperationalError

from jobsvc.accounts.authentication import ExpiringCache
from jobsvc.accounts.control_reads import before_start, cached_read
from jobsvc.handlers.errors import NotStarted
from tests.fake_clock import FakeClock


class Loads:
    """A load function whose calls answer, in order, the given values or errors."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.calls = 0

    def __call__(self) -> object:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture
def clock():
    return FakeClock(1000.0)


@pytest.fixture
def cache(clock):
    return ExpiringCache(max_size=10, clock=clock)


def test_a_fresh_value_is_served_without_a_read(cache, settings):
    settings.USER_HANDLER_CACHE_SECONDS = 10
    load = Loads(["whsec_a"])
    cached_read(cache, 7, load)

    assert cached_read(cache, 7, load) == ["whsec_a"]
    assert load.calls == 1


def test_a_cut_session_is_read_again_on_a_new_connection(cache):
    load = Loads(OperationalError("terminating connection"), ["whsec_a"])

    assert cached_read(cache, 7, load) == ["whsec_a"]


def test_an_unreachable_server_serves_the_last_value_read(cache, clock, settings):
    settings.USER_HANDLER_CACHE_SECONDS = 10
    down = OperationalError("connection refused")
    load = Loads(["whsec_a"], down, down)
    cached_read(cache, 7, load)
    clock.now += 60

    assert cached_read(cache, 7, load) == ["whsec_a"]


def test_a_user_never_read_fails_while_the_server_is_unreachable(cache):
    down = OperationalError("connection refused")

    with pytest.raises(OperationalError):
        cached_read(cache, 7, Loads(down, down))


def test_while_unreachable_the_last_value_is_kept_for_a_period_not_read_per_call(
    cache, clock, settings
):
    settings.USER_HANDLER_CACHE_SECONDS = 10
    down = OperationalError("connection timed out")
    load = Loads(["whsec_a"], down, down)
    cached_read(cache, 7, load)
    clock.now += 60
    cached_read(cache, 7, load)  # two failed reads: the first and its reconnect

    assert cached_read(cache, 7, load) == ["whsec_a"]
    assert load.calls == 3


def test_before_a_job_starts_an_unreachable_server_means_it_did_not_start(cache):
    down = OperationalError("connection refused")
    read = before_start(lambda user_id: cached_read(cache, user_id, Loads(down, down)))

    with pytest.raises(NotStarted):
        read(7)
