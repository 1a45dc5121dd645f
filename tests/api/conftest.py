"""Fixtures for the API tests: users and clients that carry their tokens."""

from __future__ import annotations

import pytest


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


SETTING_OF_THROTTLE = {
    "login": "LOGIN_THROTTLE_RATE",
    "login_account": "LOGIN_ACCOUNT_THROTTLE_RATE",
    "signup": "SIGNUP_THROTTLE_RATE",
}


class ThrottleRates:
    """Sets the rate of a throttle for one test: ``throttle_rates["login"] = "3/min"``."""

    def __init__(self, settings) -> None:
        self._settings = settings

    def __setitem__(self, throttle: str, rate: str) -> None:
        setattr(self._settings, SETTING_OF_THROTTLE[throttle], rate)


@pytest.fixture
def throttle_rates(settings) -> ThrottleRates:
    return ThrottleRates(settings)


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """The production hasher costs ~0.3 s a password on purpose; tests hash hundreds."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
