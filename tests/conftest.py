"""Shared fixtures.

Tests run against real PostgreSQL servers (and ZooKeeper and a Kafka-protocol broker)
that ``python -m tools.devstack test`` (``make test``) starts on free ports and passes
in through the ``JOBSVC_*`` environment. The databases are throwaway, so migrations are
applied to them directly instead of to ``test_*`` copies.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.db import connections
from rest_framework.test import APIClient

from jobsvc.accounts.authentication import user_cache, verified_tokens
from jobsvc.accounts.kafka_topics import topics_cache
from jobsvc.accounts.models import User
from jobsvc.accounts.tokens import token_issue
from jobsvc.accounts.webhook_secrets import secrets_cache
from jobsvc.sharding.shards import shard_aliases
from tools.bench.processes import stop_on_sigterm

DEFAULT_PASSWORD = "a long enough passphrase 42"
_usernames = (f"user{n}" for n in itertools.count())

# Each test directory's tier, so that `pytest -m unit` (no servers) is a fast loop:
#   unit         pure logic: no server, no socket, no database
#   api          the REST API in process, against the real databases
#   integration  one component against the real servers or tools it talks to
#   e2e          scheduler and executor processes on the whole stack
TIER_OF_DIRECTORY = {
    "unit": "unit",
    "api": "api",
    "client": "integration",
    "cluster": "e2e",
    "integration": "integration",
    "coordination": "integration",
    "executor": "integration",
    "loadgen": "integration",
    "packaging": "integration",
    "deploy": "integration",
    "e2e": "e2e",
}
_TESTS = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    # A run ended with SIGTERM (a CI job cancelled, the launcher passing it on) stops as
    # after Ctrl-C: fixtures are torn down, so the worker processes they started stop.
    stop_on_sigterm()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        directory = item.path.relative_to(_TESTS).parts[0]
        if directory not in TIER_OF_DIRECTORY:
            raise pytest.UsageError(f"tests/{directory}: give it a tier in TIER_OF_DIRECTORY")
        item.add_marker(TIER_OF_DIRECTORY[directory])


@pytest.fixture(scope="session")
def django_db_setup(django_db_blocker):
    with django_db_blocker.unblock():
        call_command("migrate_all", verbosity=0)


@pytest.fixture(autouse=True)
def _fresh_process_caches():
    """Throttle counters, cached users and tokens must not leak from one test into the next."""
    caches = (cache, user_cache, verified_tokens, topics_cache, secrets_cache)
    for process_cache in caches:
        process_cache.clear()
    yield
    for process_cache in caches:
        process_cache.clear()


@pytest.fixture
def make_user(db):
    def make(*, job_weight: float = 1.0, is_staff: bool = False, username: str | None = None):
        user = User(username=username or next(_usernames), job_weight=job_weight, is_staff=is_staff)
        user.set_password(DEFAULT_PASSWORD)
        user.save()
        return user

    return make


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


@pytest.fixture
def client_for():
    """An API client that sends a valid Bearer token of the given user."""

    def make(user: User) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_issue(user=user).token}")
        return client

    return make


def prepared_bulk_transactions(alias: str) -> list[str]:
    """Transactions that spread bulk requests left prepared in this alias's database."""
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
            " AND gid LIKE 'jobsvc-bulk:%%'"
        )
        return [gid for (gid,) in cursor.fetchall()]


@pytest.fixture
def no_prepared_bulk_transaction_left():
    """After the test, roll back what spread bulk requests left prepared on any shard: a
    test that failed must not leave them, or the next test's flush waits on their locks."""
    yield
    for alias in shard_aliases():
        for gid in prepared_bulk_transactions(alias):
            with connections[alias].cursor() as cursor:
                cursor.execute(f"ROLLBACK PREPARED '{gid}'")
