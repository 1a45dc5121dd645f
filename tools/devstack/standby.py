"""A streaming-replication standby of a local PostgreSQL server, and the URL that finds
whichever of them is the primary.

A standby is cloned from its running primary (`pg_basebackup`) on every start, so it
never holds a history of its own: a standby of an earlier run that fell behind, or that
someone promoted by hand, is simply replaced. It streams the primary's WAL from then on
and answers read-only queries (hot standby). `start_replicated` starts a primary, then
its standbys, then makes the first standby synchronous (`synchronous_standby_names` on
the primary; `synchronous_commit = on` is in `postgres.TUNING`), so that a commit the
primary acknowledges is already on the standby's disk.

Failover is not done here: in production an orchestrator (Patroni) promotes a standby;
locally a test runs `promote()`. The application follows through `replicated_url`, a
libpq multi-host URL with `target_session_attrs=read-write`: libpq tries the hosts in
order and keeps the first that accepts writes.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import psycopg

from .errors import ServerStartError
from .parallel import run_in_parallel
from .postgres import APP_ROLE, BOOTSTRAP_ROLE, PostgresServer

logger = logging.getLogger(__name__)

BASEBACKUP_TIMEOUT = 300.0  # seconds to clone the primary's data dir
PROMOTE_TIMEOUT = 60  # seconds `pg_ctl promote -w` waits for the standby to accept writes


class PostgresStandby(PostgresServer):
    """A hot standby of `primary`, on a port and data dir of its own."""

    kind: ClassVar[str] = "postgres-standby"

    def __init__(
        self,
        *,
        primary: PostgresServer,
        root: Path,
        port: int,
        name: str,
        log_path: Path | None = None,
        pid_file: Path | None = None,
    ) -> None:
        super().__init__(
            root=root,
            port=port,
            databases=primary.databases,
            name=name,
            log_path=log_path,
            pid_file=pid_file,
            bin_dir=primary.bin_dir,
        )
        self.primary = primary

    @property
    def application_name(self) -> str:
        """How the primary knows this standby (`pg_stat_replication`, the sync list)."""
        return self.name.replace("-", "_")

    def promote(self) -> None:
        """Make this standby a primary (`pg_ctl promote`); returns once it accepts writes."""
        result = self._run_tool(
            "pg_ctl", "promote", "-D", str(self.data_dir), "-w", "-t", str(PROMOTE_TIMEOUT),
            timeout=PROMOTE_TIMEOUT + 5,
        )  # fmt: skip
        if result != 0:
            raise ServerStartError(f"{self.name}: pg_ctl promote failed (exit {result})")
        logger.info("%s: promoted; it is a primary now", self.name)

    def _prepare(self) -> None:
        self._prepare_root()
        self._stop_leftover()
        self._clone()
        self._write_config()

    def _clone(self) -> None:
        started = time.monotonic()
        if self.data_dir.exists():
            shutil.rmtree(self.data_dir)
        result = self._run_tool(
            "pg_basebackup", "--pgdata", str(self.data_dir),
            "--host", self.primary.host, "--port", str(self.primary.port),
            "--username", BOOTSTRAP_ROLE, "--wal-method=stream", "--checkpoint=fast",
            "--no-password",
            timeout=BASEBACKUP_TIMEOUT,
        )  # fmt: skip
        if result != 0:
            raise ServerStartError(
                f"{self.name}: pg_basebackup from {self.primary.address} failed "
                f"(exit {result}); see {self.log_path}"
            )
        signal_file = self.data_dir / "standby.signal"  # start in standby mode
        signal_file.touch()
        if self._user is not None:
            os.chown(signal_file, self._user.uid, self._user.gid)
        logger.info(
            "%s: cloned %s in %.1fs", self.name, self.primary.name, time.monotonic() - started
        )

    def _settings(self) -> dict[str, str]:
        conninfo = (
            f"host={self.primary.host} port={self.primary.port} user={BOOTSTRAP_ROLE} "
            f"application_name={self.application_name}"
        )
        return {
            **super()._settings(),
            "primary_conninfo": f"'{conninfo}'",
            "hot_standby": "on",
            # Tell the primary at once what has been flushed, so its waiting commits return.
            "wal_receiver_status_interval": "1s",
            # After the primary restarts, every commit waits until this standby streams
            # again, and it tries to connect again only this often (PostgreSQL: 5 s, which
            # held every create for seconds after a one-second restart).
            "wal_retrieve_retry_interval": "250ms",
        }

    def _is_ready(self) -> bool:
        """Answers, and streams from the primary (not only replaying what it copied)."""
        try:
            with self.connect() as conn:
                row = conn.execute("SELECT status FROM pg_stat_wal_receiver").fetchone()
        except psycopg.OperationalError:
            return False
        return row is not None and row[0] == "streaming"

    def _after_ready(self) -> None:
        """Nothing: roles and databases come from the primary (a standby is read-only)."""
        return None


def start_replicated(primary: PostgresServer, standbys: Sequence[PostgresStandby]) -> None:
    """Start `primary`, then its standbys, then make commits wait for the first of them."""
    primary.start()
    if not standbys:
        return
    run_in_parallel([(standby.name, standby.start) for standby in standbys])
    primary.require_synchronous([standby.application_name for standby in standbys])


def replicated_url(
    primary: PostgresServer, standbys: Sequence[PostgresStandby], database: str
) -> str:
    """`database` on whichever of the servers accepts writes (libpq multi-host URL).

    Without standbys, the primary's plain URL.
    """
    if not standbys:
        return primary.url(database)
    hosts = ",".join(server.address for server in (primary, *standbys))
    return f"postgresql://{APP_ROLE}@{hosts}/{database}?target_session_attrs=read-write"
