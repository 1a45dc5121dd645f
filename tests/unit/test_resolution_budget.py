"""Create-time name resolution within a per-request budget: each host once, a bounded
number of hosts, a bounded time; and unbounded outside a request."""

from __future__ import annotations

import pytest

from jobsvc.handlers.errors import InvalidHandlerParams
from jobsvc.handlers.resolution import budgeted_resolver, resolution_budget
from tests.fake_clock import FakeClock


class Resolver:
    """Answers every name with one public address, taking ``seconds`` of the clock."""

    def __init__(self, clock: FakeClock, seconds: float = 0.0, fail: set[str] = frozenset()):
        self.clock, self.seconds, self.fail = clock, seconds, fail
        self.lookups: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        self.clock.now += self.seconds
        if host in self.fail:
            raise OSError("no such host")
        return ["93.184.215.14"]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(0.0)


def test_a_host_named_by_many_jobs_is_resolved_once_per_request(clock):
    lookups = Resolver(clock)
    resolve = budgeted_resolver(lookups)

    with resolution_budget(max_hosts=5, max_seconds=5, clock=clock):
        for _ in range(1000):
            resolve("hooks.example.com", 443)
        resolve("HOOKS.example.com", 443)

    assert lookups.lookups == ["hooks.example.com"]


def test_a_failed_lookup_is_remembered_for_the_request(clock):
    lookups = Resolver(clock, fail={"gone.example.com"})
    resolve = budgeted_resolver(lookups)

    with resolution_budget(max_hosts=5, max_seconds=5, clock=clock):
        for _ in range(3):
            with pytest.raises(OSError):
                resolve("gone.example.com", 443)

    assert lookups.lookups == ["gone.example.com"]


def test_more_distinct_hosts_than_the_budget_are_refused(clock):
    resolve = budgeted_resolver(Resolver(clock))

    with resolution_budget(max_hosts=3, max_seconds=5, clock=clock):
        for n in range(3):
            resolve(f"h{n}.example.com", 443)
        with pytest.raises(InvalidHandlerParams, match="at most 3 distinct hosts"):
            resolve("h3.example.com", 443)
        resolve("h1.example.com", 443)  # known already: no new lookup


def test_no_lookup_starts_once_the_time_budget_is_spent(clock):
    lookups = Resolver(clock, seconds=2.0)
    resolve = budgeted_resolver(lookups)

    with resolution_budget(max_hosts=100, max_seconds=5, clock=clock):
        for n in range(3):  # 0, 2, 4 s spent before each: all start
            resolve(f"h{n}.example.com", 443)
        with pytest.raises(InvalidHandlerParams, match="took over 5 s"):
            resolve("h3.example.com", 443)

    assert len(lookups.lookups) == 3


def test_each_request_has_its_own_budget(clock):
    lookups = Resolver(clock)
    resolve = budgeted_resolver(lookups)
    for _ in range(2):
        with resolution_budget(max_hosts=1, max_seconds=5, clock=clock):
            resolve("hooks.example.com", 443)

    assert lookups.lookups == ["hooks.example.com"] * 2


def test_outside_a_request_every_call_resolves(clock):
    lookups = Resolver(clock)
    resolve = budgeted_resolver(lookups)

    for _ in range(3):
        resolve("hooks.example.com", 443)

    assert len(lookups.lookups) == 3
