"""A local stack: PostgreSQL server(s), ZooKeeper, a Kafka broker, and the app processes,
plus the environment that points the Django settings at them.

Two shapes are built here:

- `build_run_stack(state, ...)`, for `make run`: one PostgreSQL server holding the control
  database and every shard, with data kept in the state dir across runs;
- `build_test_stack(root)` / `start_test_stack(root)`, for `make test` and for tests that need
  servers of their own: everything on free ports under `root`, and two PostgreSQL servers
  (A: control, shards 0-1; B: shards 2-3), so every test run proves that shards on
  separate servers work.

Either may give each PostgreSQL server synchronous standbys (`replicas`, see `standby`);
the URLs in `env` then name the primary and its standbys (libpq multi-host).

Use from a test::

    stack = start_test_stack(new_stack_dir())
    try:
        os.environ.update(stack.env)
        stack.zookeeper.restart()
    finally:
        stack.stop()
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from .apps import AppSpec
from .kafka import KafkaBroker
from .parallel import run_in_parallel
from .ports import free_port
from .postgres import PostgresServer
from .process import ManagedProcess
from .server import Server
from .standby import PostgresStandby, replicated_url, start_replicated
from .state import Secrets, StateDir
from .supervisor import Supervisor
from .zookeeper import ZooKeeperServer

logger = logging.getLogger(__name__)

CONTROL_DATABASE = "jobsvc_control"
SETTINGS_MODULE = "jobsvc.settings"
TEST_SHARDS = 4
TEST_POSTGRES_SERVERS = 2
TEST_STACK_DIR_ENV = "JOBSVC_TEST_STACK_DIR"  # set by `make test` for the pytest process
MANIFEST_FILE = "stack.json"  # a started test stack describes itself here (mode 0600)


def new_stack_dir(prefix: str = "jobsvc-stack-") -> Path:
    """A fresh directory for a throwaway stack, enterable by the `postgres` system user.

    Created inside `$JOBSVC_TEST_STACK_DIR` when set (so `make test` deletes it with its
    own stack), else in the system temp dir. pytest's `tmp_path` is mode 0700, which the
    `postgres` user cannot enter when the tests run as root: use this instead.
    """
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=os.environ.get(TEST_STACK_DIR_ENV)))
    path.chmod(0o755)
    return path


def shard_database(index: int) -> str:
    return f"jobsvc_shard_{index}"


class Stack:
    """Servers and app processes of one local stack; `env` points the app at them."""

    def __init__(
        self,
        *,
        root: Path,
        postgres: Sequence[PostgresServer],
        zookeeper: ZooKeeperServer,
        kafka: KafkaBroker,
        secrets: Secrets,
        logs_dir: Path,
        run_dir: Path,
        standbys: Sequence[PostgresStandby] = (),
    ) -> None:
        self.root = root
        self.postgres = tuple(postgres)  # the primaries
        self.standbys = tuple(standbys)
        self.zookeeper = zookeeper
        self.kafka = kafka
        self.secrets = secrets
        self.logs_dir = logs_dir
        self.run_dir = run_dir
        self.supervisor = Supervisor()
        self._shard_servers = _shard_servers(self.postgres)

    @property
    def servers(self) -> tuple[Server, ...]:
        return (*self.postgres, *self.standbys, self.zookeeper, self.kafka)

    def standbys_of(self, primary: PostgresServer) -> tuple[PostgresStandby, ...]:
        return tuple(s for s in self.standbys if s.primary is primary)

    def database_url(self, database: str) -> str:
        """The URL the app is given for `database`: its server, and that server's standbys."""
        server = _server_holding(self.postgres, database)
        return replicated_url(server, self.standbys_of(server), database)

    @property
    def shards(self) -> int:
        return len(self._shard_servers)

    @property
    def env(self) -> dict[str, str]:
        """The variables the Django settings read (docs/configuration.md lists them)."""
        shard_urls = (self.database_url(shard_database(index)) for index in range(self.shards))
        return {
            "DJANGO_SETTINGS_MODULE": SETTINGS_MODULE,
            "JOBSVC_CONTROL_DB_URL": self.database_url(CONTROL_DATABASE),
            "JOBSVC_SHARD_DB_URLS": ",".join(shard_urls),
            "JOBSVC_ZK_HOSTS": self.zookeeper.hosts,
            "JOBSVC_KAFKA_BOOTSTRAP": self.kafka.bootstrap,
            "JOBSVC_SECRET_KEY": self.secrets.secret_key,
            "JOBSVC_JWT_SIGNING_KEY": self.secrets.jwt_signing_key,
        }

    def process_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The full environment of a child: ours, the stack's `env`, then `extra`."""
        return {**os.environ, **self.env, "PYTHONUNBUFFERED": "1", **(extra or {})}

    def start(self) -> None:
        """Start every server at once (a standby once its primary runs); on any failure
        stop them all and raise."""
        started = time.monotonic()
        for server in self.servers:
            self.supervisor.add_server(server)
        tasks = [
            (server.name, lambda server=server: start_replicated(server, self.standbys_of(server)))
            for server in self.postgres
        ]
        tasks += [(server.name, server.start) for server in (self.zookeeper, self.kafka)]
        try:
            run_in_parallel(tasks)
        except BaseException:
            self.stop()
            raise
        logger.info("servers ready in %.1fs", time.monotonic() - started)

    def start_app(self, spec: AppSpec, *, repo: Path) -> ManagedProcess:
        return self.supervisor.start_app(
            name=spec.name,
            argv=spec.argv,
            env=self.process_env(spec.env),
            cwd=repo,
            log_path=self.logs_dir / f"{spec.name}.log",
            pid_file=self.run_dir / f"{spec.name}.pid",
        )

    def stop(self) -> None:
        """Stop app processes, then servers, in the supervisor's order. Idempotent."""
        self.supervisor.stop()

    def manifest(self) -> dict[str, object]:
        """A description of the running stack, for tests that poke at its servers."""
        return {
            "root": str(self.root),
            "env": self.env,
            "servers": [
                {
                    "name": server.name,
                    "kind": server.kind,
                    "address": server.address,
                    "pid": server.pid,
                    "root": str(server.root),
                    "log": str(server.log_path),
                }
                for server in self.servers
            ],
        }

    def write_manifest(self, path: Path) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(self.manifest(), out, indent=2)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def build_test_stack(
    root: Path,
    *,
    shards: int = TEST_SHARDS,
    postgres_servers: int = TEST_POSTGRES_SERVERS,
    secrets: Secrets | None = None,
    replicas: int = 0,
) -> Stack:
    """An unstarted throwaway stack under `root`, on free ports, with fresh secrets.

    Server 0 holds the control database; shards are spread over the servers in
    contiguous blocks (4 shards on 2 servers: 0-1 on A, 2-3 on B). `replicas` standbys
    per server are named after it (`postgres-a-standby`, or `-standby-2`... with more).
    """
    logs_dir, run_dir = root / "logs", root / "run"
    names = [f"postgres-{chr(ord('a') + index)}" for index in range(postgres_servers)]
    postgres = [
        PostgresServer(
            name=name,
            root=root / name,
            port=free_port(),
            databases=databases,
            log_path=logs_dir / f"{name}.log",
            pid_file=run_dir / f"{name}.pid",
        )
        for name, databases in zip(names, _layout(shards, postgres_servers), strict=True)
    ]
    standbys = [
        PostgresStandby(
            primary=primary,
            name=name,
            root=root / name,
            port=free_port(),
            log_path=logs_dir / f"{name}.log",
            pid_file=run_dir / f"{name}.pid",
        )
        for primary in postgres
        for name in standby_names(primary.name, replicas)
    ]
    return Stack(
        root=root,
        postgres=postgres,
        standbys=standbys,
        zookeeper=ZooKeeperServer(
            root=root / "zookeeper",
            port=free_port(),
            log_path=logs_dir / "zookeeper.log",
            pid_file=run_dir / "zookeeper.pid",
        ),
        kafka=KafkaBroker(
            root=root / "kafka",
            port=free_port(),
            controller_port=free_port(),
            log_path=logs_dir / "kafka.log",
            pid_file=run_dir / "kafka.pid",
        ),
        secrets=secrets or Secrets.generate(),
        logs_dir=logs_dir,
        run_dir=run_dir,
    )


def start_test_stack(
    root: Path,
    *,
    shards: int = TEST_SHARDS,
    postgres_servers: int = TEST_POSTGRES_SERVERS,
    secrets: Secrets | None = None,
    replicas: int = 0,
) -> Stack:
    """`build_test_stack(...)`, started, with its manifest in `root/stack.json`."""
    stack = build_test_stack(
        root, shards=shards, postgres_servers=postgres_servers, secrets=secrets, replicas=replicas
    )
    stack.start()
    stack.write_manifest(root / MANIFEST_FILE)
    return stack


def build_run_stack(
    state: StateDir,
    *,
    shards: int,
    ports: Mapping[str, int],
    secrets: Secrets,
    replicas: int = 0,
) -> Stack:
    """The unstarted `make run` stack: one PostgreSQL server, data kept in `state`.

    With `replicas`, that server's standbys (`ports[name]` each), cloned on every start.
    """
    primary = PostgresServer(
        root=state.postgres_root,
        port=ports["postgres"],
        databases=_layout(shards, 1)[0],
        log_path=state.logs_dir / "postgres.log",
        pid_file=state.run_dir / "postgres.pid",
    )
    return Stack(
        root=state.root,
        postgres=[primary],
        standbys=[
            PostgresStandby(
                primary=primary,
                name=name,
                root=state.root / name,
                port=ports[name],
                log_path=state.logs_dir / f"{name}.log",
                pid_file=state.run_dir / f"{name}.pid",
            )
            for name in standby_names(primary.name, replicas)
        ],
        zookeeper=ZooKeeperServer(
            root=state.zookeeper_root,
            port=ports["zookeeper"],
            log_path=state.logs_dir / "zookeeper.log",
            pid_file=state.run_dir / "zookeeper.pid",
        ),
        kafka=KafkaBroker(
            root=state.kafka_root,
            port=ports["kafka"],
            controller_port=ports["kafka-controller"],
            log_path=state.logs_dir / "kafka.log",
            pid_file=state.run_dir / "kafka.pid",
        ),
        secrets=secrets,
        logs_dir=state.logs_dir,
        run_dir=state.run_dir,
    )


def standby_names(primary: str, replicas: int) -> list[str]:
    """Names of a server's standbys: `postgres-standby`, or `-standby-1`, `-standby-2`..."""
    if replicas == 1:
        return [f"{primary}-standby"]
    return [f"{primary}-standby-{index}" for index in range(1, replicas + 1)]


def _layout(shards: int, servers: int) -> list[list[str]]:
    """Database names per server: control on the first, shards in contiguous blocks."""
    if shards < 1 or servers < 1:
        raise ValueError("a stack needs at least one shard and one PostgreSQL server")
    layout: list[list[str]] = [[] for _ in range(servers)]
    layout[0].append(CONTROL_DATABASE)
    for index in range(shards):
        layout[index * servers // shards].append(shard_database(index))
    return layout


def _shard_servers(postgres: Sequence[PostgresServer]) -> list[PostgresServer]:
    shards = sum(1 for s in postgres for db in s.databases if db.startswith("jobsvc_shard_"))
    return [_server_holding(postgres, shard_database(index)) for index in range(shards)]


def _server_holding(postgres: Sequence[PostgresServer], database: str) -> PostgresServer:
    for server in postgres:
        if database in server.databases:
            return server
    raise ValueError(f"no PostgreSQL server holds {database}")
