"""A PostgreSQL server of the local stack: one data dir, one loopback port, some databases.

Files under `root`: `data/` (the cluster, created by initdb on first start) and `run/`
(the unix socket). The server listens only on 127.0.0.1 and trusts every local
connection, so URLs carry no password: `postgresql://jobsvc@127.0.0.1:PORT/DBNAME`.
Databases are owned by the role `jobsvc` (superuser, so migrations can create extensions).
A server may have synchronous standbys (`standby.PostgresStandby`): `require_synchronous`
makes every commit wait until one of them has the commit on disk.

PostgreSQL refuses to run as root: when this process is root, initdb, postgres and pg_ctl
run as the `postgres` system user, which then owns `root`. Every directory above `root`
must be enterable by that user.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import psycopg
from psycopg import sql

from .errors import BinaryNotFound, LocalStackError, ServerStartError
from .polling import poll_until
from .process import RunAs
from .server import Server

logger = logging.getLogger(__name__)

APP_ROLE = "jobsvc"  # owns the databases; every URL connects as this role
BOOTSTRAP_ROLE = "postgres"  # superuser created by initdb
SYSTEM_USER = "postgres"  # runs the server when this process is root
PG_BIN_DIR_ENV = "JOBSVC_PG_BIN_DIR"  # overrides the search for PostgreSQL binaries
PG_INSTALL_ROOT = Path("/usr/lib/postgresql")  # Debian: /usr/lib/postgresql/<major>/bin
INITDB_TIMEOUT = 120.0  # seconds
PG_CTL_STOP_TIMEOUT = 30  # seconds pg_ctl waits for a fast shutdown
PG_EXIT_WAIT = 5.0  # seconds for the postmaster to exit once pg_ctl is done, or on SIGQUIT
CONNECT_TIMEOUT = 2  # seconds for one readiness connection attempt
UNIX_SOCKET_PATH_MAX = 107  # bytes in sun_path, including the socket file name
CONFIG_FILE = "localstack.conf"  # written on every start, included by postgresql.conf

# Tuned for a 2-core development box running a high-insert queue workload, without
# giving up durability: a crash (or a kill -9) of the launcher never loses a commit.
TUNING: dict[str, str] = {
    "max_connections": "300",  # gunicorn threads + workers + tests, per server
    # Bulk requests spread over the shards commit in two phases (jobsvc/jobs/spread.py):
    # at most one prepared transaction per shard and request in flight.
    "max_prepared_transactions": "100",
    "shared_buffers": "256MB",
    "effective_cache_size": "1GB",
    "work_mem": "8MB",
    "maintenance_work_mem": "128MB",
    "wal_buffers": "16MB",
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    # Fewer, spread-out checkpoints: fewer full-page images in the WAL of busy inserts.
    "checkpoint_timeout": "15min",
    "checkpoint_completion_target": "0.9",
    "max_wal_size": "4GB",
    "min_wal_size": "256MB",
    "random_page_cost": "1.1",  # SSD
    "effective_io_concurrency": "200",
    "max_parallel_workers_per_gather": "1",  # 2 cores: leave one for the other sessions
    # Queue tables churn (insert, update, delete): vacuum them early and often so dead
    # tuples do not pile up in the hot index ranges the schedulers scan.
    "autovacuum": "on",
    "autovacuum_max_workers": "3",
    "autovacuum_naptime": "10s",
    "autovacuum_vacuum_scale_factor": "0.02",
    "autovacuum_vacuum_insert_scale_factor": "0.05",
    # Statistics at PostgreSQL's default pace (after 10 % of the rows changed): ANALYZE
    # reads up to 30,000 pages, so at every 2 % it took CPU in step with the growing job
    # tables. The schedulers' queries do not lean on fresh estimates (scheduler_worker/
    # queries.py).
    "autovacuum_vacuum_cost_limit": "2000",
    "autovacuum_vacuum_cost_delay": "2ms",
    "timezone": "UTC",
    "log_timezone": "UTC",
    "lc_messages": "C",
    "log_line_prefix": "'%m [%p] %q%u@%d '",
    "log_checkpoints": "on",
    "log_lock_waits": "on",
    "log_min_duration_statement": "1s",
    # ... and its plan (estimates only: measuring every statement would slow them all).
    "shared_preload_libraries": "'auto_explain'",
    "auto_explain.log_min_duration": "1s",
    # A slow statement is logged without its bound parameters (job messages, header
    # values); the logs dir is the launcher user's alone besides (tools/devstack/state.py).
    "log_parameter_max_length": "0",
    "log_autovacuum_min_duration": "10s",
}

HBA = """\
# Written by tools/devstack on every start: trust the unix socket and loopback, nothing
# else. Replication connections (a standby's pg_basebackup and WAL stream) likewise.
local all         all              trust
host  all         all 127.0.0.1/32 trust
local replication all              trust
host  replication all 127.0.0.1/32 trust
"""
SYNCHRONOUS_TIMEOUT = 60.0  # seconds for a standby to be synchronous once asked to be


class PostgresServer(Server):
    """One PostgreSQL cluster on 127.0.0.1 holding `databases` (created if missing)."""

    kind: ClassVar[str] = "postgres"
    ready_timeout: ClassVar[float] = 120.0  # crash recovery after a hard kill can take a while
    stop_signal: ClassVar[int] = signal.SIGINT  # fast shutdown, what `pg_ctl stop -m fast` sends

    def __init__(
        self,
        *,
        root: Path,
        port: int,
        databases: Sequence[str] = (),
        name: str = "postgres",
        log_path: Path | None = None,
        pid_file: Path | None = None,
        bin_dir: Path | None = None,
    ) -> None:
        super().__init__(name=name, root=root, port=port, log_path=log_path, pid_file=pid_file)
        self.databases = tuple(databases)
        self.data_dir = root / "data"
        self.socket_dir = root / "run"
        self.bin_dir = bin_dir if bin_dir is not None else find_bin_dir(data_dir=self.data_dir)
        self._user = RunAs.lookup(SYSTEM_USER) if os.geteuid() == 0 else None
        self._synchronous_standbys: tuple[str, ...] = ()  # their application names

    def url(self, database: str) -> str:
        """The URL the app uses for `database` on this server."""
        return f"postgresql://{APP_ROLE}@{self.host}:{self.port}/{database}"

    def connect(
        self, database: str = "postgres", *, user: str = BOOTSTRAP_ROLE
    ) -> psycopg.Connection:
        """An autocommit connection to `database` (for set-up work and tests)."""
        return psycopg.connect(
            host=self.host,
            port=self.port,
            user=user,
            dbname=database,
            connect_timeout=CONNECT_TIMEOUT,
            autocommit=True,
        )

    def stop(self) -> None:
        """Fast shutdown (`pg_ctl stop -m fast`); SIGQUIT, then SIGKILL, if that hangs."""
        process = self._process
        if process is None:
            return
        # A server restarted behind the launcher's back (`pg_ctl restart`, as the database
        # fault tests do) runs under another pid: its pid file says it is there.
        if process.is_running() or (self.data_dir / "postmaster.pid").exists():
            result = self._run_tool(
                "pg_ctl", "stop", "-D", str(self.data_dir), "-m", "fast",
                "-w", "-t", str(PG_CTL_STOP_TIMEOUT),
                timeout=PG_CTL_STOP_TIMEOUT + 5,
            )  # fmt: skip
            if result != 0 or process.wait(PG_EXIT_WAIT) is None:
                logger.warning("%s: pg_ctl stop failed (exit %s)", self.name, result)
        # Still running only if pg_ctl failed. SIGQUIT is PostgreSQL's immediate shutdown
        # (the next start replays the WAL); SIGKILL follows if even that hangs. On an
        # exited process this only closes the log and removes the pid file.
        process.stop(timeout=PG_EXIT_WAIT, signum=signal.SIGQUIT)

    def require_synchronous(self, standby_names: Sequence[str]) -> None:
        """From now on a commit waits until one of these standbys has it on disk.

        Set on the running server (the config is rewritten and reloaded), and kept for
        its later starts. Returns once the first standby is synchronous; a standby that
        never connects raises `ServerStartError`. Only once the standbys stream: asked
        earlier, the server's own start-up writes (roles, databases) would wait forever.
        """
        self._synchronous_standbys = tuple(standby_names)
        self._write_config()
        with self.connect() as conn:
            conn.execute("SELECT pg_reload_conf()")

            def synchronous() -> bool:
                row = conn.execute(
                    "SELECT 1 FROM pg_stat_replication"
                    " WHERE application_name = %s AND sync_state = 'sync'",
                    (standby_names[0],),
                ).fetchone()
                return row is not None

            if not poll_until(synchronous, timeout=SYNCHRONOUS_TIMEOUT):
                raise ServerStartError(
                    f"{self.name}: standby {standby_names[0]} was not synchronous within "
                    f"{SYNCHRONOUS_TIMEOUT:.0f}s; see {self.log_path}"
                )
        logger.info("%s: commits wait for the synchronous standby %s", self.name, standby_names[0])

    def _prepare(self) -> None:
        self._prepare_root()
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        self._stop_leftover()
        self._write_config()

    def _prepare_root(self) -> None:
        """`root` and its socket dir, owned by the system user the server runs as."""
        if self._user is not None:
            _check_enterable(self.root, self._user)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        if self._user is not None:
            _chown_tree(self.root, self._user)

    def _argv(self) -> list[str]:
        return [str(self.bin_dir / "postgres"), "-D", str(self.data_dir)]

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        if self._user is not None:
            env["HOME"] = str(self.root)
        return env

    def _run_as(self) -> RunAs | None:
        return self._user

    def _is_ready(self) -> bool:
        try:
            with self.connect():
                return True
        except psycopg.OperationalError:
            return False

    def _after_ready(self) -> None:
        with self.connect() as conn:
            role = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (APP_ROLE,))
            if role.fetchone() is None:
                create_role = sql.SQL("CREATE ROLE {} LOGIN SUPERUSER")
                conn.execute(create_role.format(sql.Identifier(APP_ROLE)))
            for database in self.databases:
                exists = conn.execute(
                    "SELECT 1 FROM pg_database WHERE datname = %s", (database,)
                ).fetchone()
                if not exists:
                    conn.execute(
                        sql.SQL("CREATE DATABASE {} OWNER {}").format(
                            sql.Identifier(database), sql.Identifier(APP_ROLE)
                        )
                    )
                    logger.info("%s: created database %s", self.name, database)

    def _initdb(self) -> None:
        logger.info("%s: initdb %s (PostgreSQL %s)", self.name, self.data_dir, self.bin_dir)
        result = self._run_tool(
            "initdb", "-D", str(self.data_dir), "-U", BOOTSTRAP_ROLE, "--encoding=UTF8",
            "--no-locale", "--auth=trust", "--no-instructions",
            timeout=INITDB_TIMEOUT,
        )  # fmt: skip
        if result != 0:
            raise ServerStartError(
                f"initdb of {self.data_dir} failed (exit {result}); see {self.log_path}"
            )
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.write(
                f"\n# Settings of tools/devstack, rewritten on every start.\n"
                f"include '{CONFIG_FILE}'\n"
            )

    def _settings(self) -> dict[str, str]:
        """What `CONFIG_FILE` sets, as postgresql.conf values."""
        settings = {
            "listen_addresses": f"'{self.host}'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self._socket_dir_setting()}'",
            **TUNING,
        }
        if self._synchronous_standbys:
            # FIRST 1: the first listed standby that streams is synchronous (sync_state
            # 'sync'); the others wait in line ('potential').
            names = ", ".join(f'"{name}"' for name in self._synchronous_standbys)
            settings["synchronous_standby_names"] = f"'FIRST 1 ({names})'"
        return settings

    def _write_config(self) -> None:
        path = self.data_dir / CONFIG_FILE
        path.write_text(
            "# Written by tools/devstack on every start; edits are lost.\n"
            + "".join(f"{key} = {value}\n" for key, value in self._settings().items())
        )
        hba = self.data_dir / "pg_hba.conf"
        hba.write_text(HBA)
        if self._user is not None:
            for written in (path, hba):
                os.chown(written, self._user.uid, self._user.gid)

    def _socket_dir_setting(self) -> str:
        socket_path = self.socket_dir / f".s.PGSQL.{self.port}"
        if len(os.fsencode(socket_path)) <= UNIX_SOCKET_PATH_MAX:
            return str(self.socket_dir)
        logger.warning(
            "%s: %s is too long for a unix socket; the server listens on TCP only",
            self.name,
            socket_path,
        )
        return ""

    def _stop_leftover(self) -> None:
        """Stop a server still running on this data dir from a launch that died hard."""
        if not (self.data_dir / "postmaster.pid").exists():
            return
        if self._run_tool("pg_ctl", "status", "-D", str(self.data_dir), timeout=10) == 0:
            logger.warning("%s: stopping a server left running on %s", self.name, self.data_dir)
            self._run_tool(
                "pg_ctl", "stop", "-D", str(self.data_dir), "-m", "fast", "-w",
                "-t", str(PG_CTL_STOP_TIMEOUT), timeout=PG_CTL_STOP_TIMEOUT + 5,
            )  # fmt: skip

    def _run_tool(self, tool: str, *args: str, timeout: float) -> int | None:
        """Run a PostgreSQL program (as the system user when root), output to the log."""
        privileges = {}
        if self._user is not None:
            privileges = {"user": self._user.uid, "group": self._user.gid, "extra_groups": []}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            try:
                return subprocess.run(
                    [str(self.bin_dir / tool), *args],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self._env(),
                    cwd=self.root,
                    # Own session: a second Ctrl-C at the terminal must not kill a
                    # `pg_ctl stop` half way through the launcher's teardown.
                    start_new_session=True,
                    timeout=timeout,
                    check=False,
                    **privileges,
                ).returncode
            except subprocess.TimeoutExpired:
                logger.warning("%s: %s did not finish within %.0fs", self.name, tool, timeout)
                return None


def find_bin_dir(*, data_dir: Path | None = None) -> Path:
    """The directory holding `postgres`, `initdb` and `pg_ctl`.

    `$JOBSVC_PG_BIN_DIR` wins; else the Debian install matching the data dir's version,
    else the highest installed version.
    """
    override = os.environ.get(PG_BIN_DIR_ENV)
    if override:
        return Path(override)
    installed = {
        int(match.group(1)): path.parent
        for path in PG_INSTALL_ROOT.glob("*/bin/postgres")
        if (match := re.fullmatch(r"(\d+)", path.parent.parent.name))
    }
    if not installed:
        raise BinaryNotFound(
            f"no PostgreSQL server under {PG_INSTALL_ROOT}/*/bin (run `make bootstrap`, "
            f"or set {PG_BIN_DIR_ENV})"
        )
    version_file = data_dir / "PG_VERSION" if data_dir is not None else None
    if version_file is not None and version_file.exists():
        major = int(version_file.read_text().strip())
        if major not in installed:
            raise LocalStackError(
                f"{data_dir} was created by PostgreSQL {major}, which is not installed "
                f"(found {sorted(installed)}); install it or delete the data "
                "(`make clean-state`)"
            )
        return installed[major]
    return installed[max(installed)]


def _check_enterable(path: Path, user: RunAs) -> None:
    """Fail clearly if `user` cannot reach `path` (an ancestor lacks the x bit for it)."""
    for directory in [path, *path.parents]:
        if not directory.exists():
            continue
        info = directory.stat()
        if info.st_uid == user.uid:
            allowed = info.st_mode & stat.S_IXUSR
        elif info.st_gid == user.gid:
            allowed = info.st_mode & stat.S_IXGRP
        else:
            allowed = info.st_mode & stat.S_IXOTH
        if not allowed:
            raise LocalStackError(
                f"PostgreSQL runs as the {user.user!r} user, which cannot enter {directory} "
                f"(mode {stat.filemode(info.st_mode)}): `chmod o+x {directory}` or move the "
                "project somewhere that user can reach"
            )


def _chown_tree(root: Path, user: RunAs) -> None:
    """Hand `root` to `user` (skipped when it already owns it)."""
    if root.stat().st_uid == user.uid and (root / "run").stat().st_uid == user.uid:
        return
    for directory, _dirs, files in os.walk(root):
        os.chown(directory, user.uid, user.gid)
        for name in files:
            os.chown(os.path.join(directory, name), user.uid, user.gid)
