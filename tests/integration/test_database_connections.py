"""Every connection the service opens bounds its statements and notices a vanished server."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from django.db import connections

from jobsvc.sharding.shards import shard_alias

pytestmark = pytest.mark.django_db(databases="__all__")

HANG = textwrap.dedent(
    """
    import django, time
    django.setup()
    from django.db import OperationalError, connections
    started = time.monotonic()
    try:
        with connections["shard_0"].cursor() as cursor:
            cursor.execute("SELECT pg_sleep(20)")
        print("finished")
    except OperationalError as exc:
        print(type(exc.__cause__).__name__, round(time.monotonic() - started, 1))
    """
)


def test_a_statement_past_the_statement_timeout_is_cancelled_by_the_server():
    env = {**os.environ, "JOBSVC_DB_STATEMENT_TIMEOUT_SECONDS": "0.3"}

    result = subprocess.run(
        [sys.executable, "-c", HANG], env=env, capture_output=True, text=True, timeout=60
    )

    error, seconds = result.stdout.split()
    assert error == "QueryCanceled", result.stdout + result.stderr
    assert float(seconds) < 10  # cancelled, not waited out (pg_sleep(20))


@pytest.mark.parametrize("alias", ["default", shard_alias(0)])
def test_connections_use_tcp_keepalives(alias):
    connection = connections[alias]
    connection.ensure_connection()

    parameters = connection.connection.info.get_parameters()

    assert parameters["keepalives"] == "1"
    assert int(parameters["keepalives_idle"]) > 0


BREAK_IN_TRANSACTION = textwrap.dedent(
    """
    import django
    django.setup()
    from django.db import DatabaseError, connections, transaction
    from django.db.backends.signals import connection_created
    opened = []
    connection_created.connect(lambda sender, **kwargs: opened.append(1), weak=False)
    connection = connections["shard_0"]
    connection.ensure_connection()
    opened.clear()
    try:
        with transaction.atomic(using="shard_0"), connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    except DatabaseError:
        print("failed", len(opened))
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    print("next", len(opened))
    """
)


def test_a_transaction_whose_connection_broke_fails_without_connecting_again():
    """Leaving the failed transaction opens no connection: to a server that stopped
    answering, that connect would hold the caller for ``connect_timeout`` more. The next
    statement connects again."""
    result = subprocess.run(
        [sys.executable, "-c", BREAK_IN_TRANSACTION],
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.stdout.split() == ["failed", "0", "next", "1"], result.stdout + result.stderr
