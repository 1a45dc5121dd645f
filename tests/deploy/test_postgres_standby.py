"""A replicated PostgreSQL server of the local stack (tools/devstack/standby.py).

On throwaway servers of its own (never the shared test stack): the standby streams
synchronously, a commit the primary acknowledged is on the standby, and after the primary
is killed and the standby promoted, the multi-host URL the application is given reaches
the promoted server and the acknowledged write is there.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator

import psycopg
import pytest

from tests.waiting import wait_until
from tools.devstack.ports import free_port
from tools.devstack.postgres import PostgresServer
from tools.devstack.stack import build_test_stack, new_stack_dir
from tools.devstack.standby import PostgresStandby, replicated_url, start_replicated

DATABASE = "jobsvc_shard_0"
TIMEOUT = 10.0  # seconds for a replicated row to be visible, for a killed server to be gone


@pytest.fixture
def replicated() -> Iterator[tuple[PostgresServer, PostgresStandby]]:
    root = new_stack_dir("jobsvc-standby-")
    primary = PostgresServer(
        name="postgres-a", root=root / "postgres-a", port=free_port(), databases=[DATABASE]
    )
    standby = PostgresStandby(
        primary=primary, name="postgres-a-standby", root=root / "standby", port=free_port()
    )
    try:
        start_replicated(primary, [standby])
        yield primary, standby
    finally:
        standby.stop()
        primary.stop()
        shutil.rmtree(root, ignore_errors=True)


def rows(conn: psycopg.Connection) -> list[str]:
    return [row[0] for row in conn.execute("SELECT note FROM acknowledged ORDER BY note")]


def test_an_acknowledged_write_survives_the_loss_of_the_primary(replicated):
    primary, standby = replicated
    url = replicated_url(primary, [standby], DATABASE)
    assert url == (
        f"postgresql://jobsvc@{primary.address},{standby.address}/{DATABASE}"
        "?target_session_attrs=read-write"
    )

    with primary.connect(DATABASE) as conn:
        replication = conn.execute(
            "SELECT application_name, state, sync_state FROM pg_stat_replication"
        ).fetchall()
        assert replication == [("postgres_a_standby", "streaming", "sync")]
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
        conn.execute("CREATE TABLE acknowledged (note text PRIMARY KEY)")
        conn.execute("INSERT INTO acknowledged VALUES ('before')")

    with standby.connect(DATABASE) as on_standby:
        assert on_standby.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
        wait_until(
            lambda: _table_exists(on_standby) and rows(on_standby) == ["before"],
            timeout=TIMEOUT,
            what="the committed row is on the standby",
        )

    # The URL only ever lands on a server that accepts writes: not on the standby.
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as app:
        assert app.info.port == primary.port
        app.execute("INSERT INTO acknowledged VALUES ('last acknowledged')")  # committed
    # Killed right after the acknowledgement: no time to ship anything more.
    os.kill(primary.pid, signal.SIGKILL)
    wait_until(lambda: not primary.is_running(), timeout=TIMEOUT, what="the primary is gone")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=2).close()  # the standby is read-only still

    standby.promote()

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as app:
        assert app.info.port == standby.port
        assert app.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)
        assert rows(app) == ["before", "last acknowledged"]
        app.execute("INSERT INTO acknowledged VALUES ('after failover')")


def _table_exists(conn: psycopg.Connection) -> bool:
    return conn.execute("SELECT to_regclass('acknowledged') IS NOT NULL").fetchone()[0]


def test_a_stack_without_replicas_gives_the_plain_urls_it_always_gave(tmp_path):
    stack = build_test_stack(tmp_path)
    a, b = stack.postgres
    assert stack.standbys == ()
    assert stack.env["JOBSVC_CONTROL_DB_URL"] == f"postgresql://jobsvc@{a.address}/jobsvc_control"
    assert stack.env["JOBSVC_SHARD_DB_URLS"].split(",") == [
        f"postgresql://jobsvc@{server.address}/jobsvc_shard_{index}"
        for index, server in enumerate([a, a, b, b])
    ]


def test_a_stack_with_replicas_names_each_server_and_its_standby_in_one_url(tmp_path):
    stack = build_test_stack(tmp_path, replicas=1)
    a, b = stack.postgres
    a_standby, b_standby = stack.standbys
    assert (a_standby.primary, b_standby.primary) == (a, b)
    assert {s.name: s.kind for s in stack.servers if s.kind.startswith("postgres")} == {
        "postgres-a": "postgres",
        "postgres-b": "postgres",
        "postgres-a-standby": "postgres-standby",
        "postgres-b-standby": "postgres-standby",
    }
    hosts_a = f"{a.address},{a_standby.address}"
    assert stack.env["JOBSVC_CONTROL_DB_URL"] == (
        f"postgresql://jobsvc@{hosts_a}/jobsvc_control?target_session_attrs=read-write"
    )
    assert stack.database_url("jobsvc_shard_3") == (
        f"postgresql://jobsvc@{b.address},{b_standby.address}/jobsvc_shard_3"
        "?target_session_attrs=read-write"
    )
