"""The test stack's PostgreSQL servers, for tests that restart one under running workers.

`make test` describes its stack in a manifest (``JOBSVC_TEST_STACK_DIR``/stack.json); a
server is restarted in place with ``pg_ctl restart`` (fast shutdown: every session is
ended, as in a real restart), as the system user PostgreSQL runs as. The launcher still
stops a server restarted this way when the run ends.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import psycopg
from django.conf import settings

from tools.devstack.postgres import PG_BIN_DIR_ENV, SYSTEM_USER
from tools.devstack.process import RunAs
from tools.devstack.stack import MANIFEST_FILE, TEST_STACK_DIR_ENV

RESTART_TIMEOUT = 60  # seconds for pg_ctl to stop the server and see it accept connections


def postgres_server(*, holding: str) -> dict:
    """The manifest entry of the PostgreSQL server holding database alias ``holding``."""
    port = int(settings.DATABASES[holding]["PORT"])
    [server] = [server for server in _postgres_servers() if server["address"].endswith(f":{port}")]
    return server


_LOG_LINE_MAX = 300  # characters of a PostgreSQL log line shown


def postgres_log_marks() -> dict[str, int]:
    """Where each PostgreSQL server's log ends now, for ``postgres_logs_since``."""
    return {server["log"]: Path(server["log"]).stat().st_size for server in _postgres_servers()}


def postgres_logs_since(marks: dict[str, int]) -> str:
    """What the servers logged since ``marks``: slow statements and their plans,
    checkpoints, long autovacuums and lock waits (tools/devstack/postgres.py), to explain a
    slow moment. Long lines (a statement's arrays of ids) are cut, so the plans show."""
    parts = []
    for log, mark in marks.items():
        with open(log, "rb") as file:
            file.seek(mark)
            lines = file.read().decode(errors="replace").splitlines()
        cut = [
            line if len(line) <= _LOG_LINE_MAX else f"{line[:_LOG_LINE_MAX]}..." for line in lines
        ]
        parts.append("\n".join([f"--- {Path(log).name}", *cut]))
    return "\n".join(parts)


def _postgres_servers() -> list[dict]:
    manifest = json.loads((Path(os.environ[TEST_STACK_DIR_ENV]) / MANIFEST_FILE).read_text())
    return [server for server in manifest["servers"] if server["kind"] == "postgres"]


def restart_postgres(server: dict) -> None:
    """Restart the server in place; return once it accepts connections again."""
    data_dir = Path(server["root"]) / "data"
    user = RunAs.lookup(SYSTEM_USER) if os.geteuid() == 0 else None
    privileges = {"user": user.uid, "group": user.gid, "extra_groups": []} if user else {}
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    env.update(LC_ALL="C", HOME=server["root"])
    with open(server["log"], "ab") as log:
        subprocess.run(
            [
                str(Path(os.environ[PG_BIN_DIR_ENV]) / "pg_ctl"),
                *("restart", "-D", str(data_dir), "-m", "fast", "-w"),
                *("-t", str(RESTART_TIMEOUT)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=server["root"],
            start_new_session=True,
            timeout=RESTART_TIMEOUT + 10,
            check=True,
            **privileges,
        )


def terminate_every_session(*, holding: str) -> int:
    """End every other client session of the server holding ``holding``; return how many."""
    server = settings.DATABASES[holding]
    with psycopg.connect(
        host=server["HOST"],
        port=server["PORT"],
        user=server["USER"],
        dbname=server["NAME"],
        autocommit=True,
    ) as connection:
        rows = connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
        ).fetchall()
    return len(rows)
