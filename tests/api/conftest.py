"""Fixtures for the API tests: users and clients that carry their tokens."""

from __future__ import annotations

import pytest
from rest_framework.throttling import ScopedRateThrottle


@pytest.fixture
def user(make_user):
    return make_user()


@pytest.fixture
def other_user(make_user):
    return make_user()


@pytest.fixture
def staff_user(make_user):
    return make_user(is_staff=True)


@pytest.fixture
def user_client(client_for, user):
    return client_for(user)


@pytest.fixture
def other_client(client_for, other_user):
    return client_for(other_user)


@pytest.fixture
def staff_client(client_for, staff_user):
    return client_for(staff_user)


@pytest.fixture
def throttle_rates(monkeypatch) -> dict[str, str]:
    """The API's throttle rates by scope, as a copy the test may change."""
    rates = dict(ScopedRateThrottle.THROTTLE_RATES)
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", rates)
    return rates


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """The production hasher costs ~0.3 s a password on purpose; tests hash hundreds."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
