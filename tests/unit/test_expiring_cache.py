"""The per-process caches of users and verified tokens: expiry and size bound."""

from __future__ import annotations

from jobsvc.accounts.authentication import ExpiringCache
from tests.fake_clock import FakeClock


def test_an_entry_is_answered_until_its_expiry_and_not_at_it():
    clock = FakeClock(1000.0)
    cache = ExpiringCache(max_size=10, clock=clock)
    cache.put("token", "verified", expires_at=1010.0)
    clock.now = 1009.9
    assert cache.get("token") == (True, "verified")
    clock.now = 1010.0
    assert cache.get("token") == (False, None)


def test_an_entry_already_expired_is_not_stored():
    clock = FakeClock(1000.0)
    cache = ExpiringCache(max_size=10, clock=clock)
    cache.put("token", "verified", expires_at=clock.now)
    assert cache.get("token") == (False, None)


def test_a_cached_none_is_a_hit():
    cache = ExpiringCache(max_size=10, clock=FakeClock(1000.0))
    cache.put(7, None, expires_at=2000.0)
    assert cache.get(7) == (True, None)


def test_the_least_recently_used_entry_goes_first_when_full():
    cache = ExpiringCache(max_size=2, clock=FakeClock(1000.0))
    cache.put("a", 1, expires_at=2000.0)
    cache.put("b", 2, expires_at=2000.0)
    assert cache.get("a") == (True, 1)  # "b" is now the least recently used
    cache.put("c", 3, expires_at=2000.0)
    assert cache.get("b") == (False, None)
    assert cache.get("a") == (True, 1)
    assert cache.get("c") == (True, 3)
