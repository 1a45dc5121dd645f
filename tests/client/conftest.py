"""Fixtures for the client tests: the API served by gunicorn, and a logged-in client."""

from __future__ import annotations

import pytest

from jobsvc_client import Client
from tests.conftest import DEFAULT_PASSWORD
from tests.served_api import serving_api


@pytest.fixture(scope="module")
def served_api():
    with serving_api() as base:
        yield base


@pytest.fixture
def user(make_user):
    return make_user()


@pytest.fixture
def client(served_api, user) -> Client:
    client = Client(served_api)
    client.login(username=user.username, password=DEFAULT_PASSWORD)
    return client
