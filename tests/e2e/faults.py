"""Faults of the servers underneath the workers, made on the test stack's real servers.

A shard taken offline refuses every new connection (``ALLOW_CONNECTIONS false``) and
loses the ones it had (``pg_terminate_backend``), as a shard server that went down or a
network partition does; it comes back on leaving the context. One connection can be ended
alone (``terminate_connection``). A worker can be given its own address of a shard: one where
nothing listens (``shard_nowhere``), or a proxy the test cuts and restores (``shard_through``);
or of the control database, where nothing listens (``control_nowhere``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import psycopg
from django.conf import settings
from django.db import connections
from psycopg import sql

from jobsvc.sharding.shards import shard_alias
from tests.coordination.support import FaultProxy
from tools.devstack.ports import free_port


def shard_at(shard: int, url: str) -> dict[str, str]:
    """A worker's environment in which ``shard``'s database is at ``url``."""
    urls = list(settings.SHARD_DB_URLS)
    urls[shard] = url
    return {"JOBSVC_SHARD_DB_URLS": ",".join(urls)}


def shard_nowhere(shard: int) -> dict[str, str]:
    """A worker's environment in which ``shard`` is at an address where nothing listens."""
    return shard_at(shard, f"postgresql://jobsvc@127.0.0.1:{free_port()}/nowhere")


def control_nowhere() -> dict[str, str]:
    """A worker's environment in which the control database is where nothing listens."""
    return {"JOBSVC_CONTROL_DB_URL": f"postgresql://jobsvc@127.0.0.1:{free_port()}/nowhere"}


def shard_through(proxy: FaultProxy, shard: int) -> dict[str, str]:
    """A worker's environment in which ``shard``'s database is reached through ``proxy``."""
    url = urlsplit(settings.SHARD_DB_URLS[shard])
    user = url.netloc.rsplit("@", 1)[0]
    return shard_at(shard, url._replace(netloc=f"{user}@{proxy.hosts}").geturl())


@contextmanager
def shard_offline(shard_id: int) -> Iterator[None]:
    """No client can use the shard's database inside the block (the test included)."""
    alias = shard_alias(shard_id)
    database = connections[alias].settings_dict["NAME"]
    connections[alias].close()
    _set_allow_connections(alias, database, allowed=False)
    try:
        yield
    finally:
        _set_allow_connections(alias, database, allowed=True)
        connections[alias].close()  # the test's own connection was ended too


def terminate_connection(alias: str) -> None:
    """End this thread's connection to ``alias`` from the server's side, as a lost network
    or a restarted pooler would; its next use fails."""
    connection = connections[alias]
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    with _maintenance_connection(alias) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", [pid])


def _maintenance_connection(alias: str) -> psycopg.Connection:
    """A connection to the server's maintenance database, as the alias's user."""
    params = connections[alias].settings_dict
    return psycopg.connect(
        dbname="postgres",
        user=params["USER"],
        password=params["PASSWORD"] or None,
        host=params["HOST"],
        port=params["PORT"] or None,
        autocommit=True,
    )


def _set_allow_connections(alias: str, database: str, *, allowed: bool) -> None:
    """From the server's maintenance database: a database cannot refuse the connection
    that would let it in again."""
    with _maintenance_connection(alias) as conn:
        conn.execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
                sql.Identifier(database), sql.SQL("true" if allowed else "false")
            )
        )
        if not allowed:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                [database],
            )


def shard_failures(executor, shard: int) -> int:
    """Claims, records and probes of ``shard`` the executor logged as failed."""
    return sum(
        f"shard {shard}: {action} failed" in line
        for line in executor.log().splitlines()
        for action in ("claim", "record", "clock")
    )
