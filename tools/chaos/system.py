"""The system under test: a throwaway stack of real servers and the app processes on it.

The app processes are the ones `make run` starts (`localstack.apps.app_specs`), with the
end-to-end tests' fast failure timings, so that recovery takes seconds, not minutes. The
nemesis signals an app's whole process group (gunicorn's workers with their master) and
starts a killed app again, as `make run`'s process manager does.

Run as root, the system can also be partitioned and run out of disk: each app runs with a
group of its own, which the `Firewall` cuts off from a server's port (`cut`, `heal_cut`),
and the server holding shards 2-3 keeps its files on a small tmpfs (`small_disk`).
Elsewhere those faults are left out (`unavailable`).
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

import psycopg

from tools.bench.processes import REPO, WorkerProcess
from tools.devstack.apps import app_specs
from tools.devstack.management import ENSURE_TOPICS, SETUP_COMMANDS, run_commands
from tools.devstack.polling import poll_until
from tools.devstack.ports import LOOPBACK, free_port
from tools.devstack.probes import http_ok
from tools.devstack.server import Server
from tools.devstack.stack import (
    MANIFEST_FILE,
    Stack,
    build_test_stack,
    new_stack_dir,
    shard_database,
)
from tools.fast_timings import FAST_FAILURE_TIMINGS

from . import disk, firewall
from .disk import SmallDisk
from .firewall import Firewall, app_group

logger = logging.getLogger(__name__)

API_READY_TIMEOUT = 60.0  # seconds for gunicorn to answer /healthz after a (re)start
# The end-to-end tests' timings and the failover bench's queued lease: a fault's
# consequences are repaired within seconds.
FAST_TIMINGS = {
    **FAST_FAILURE_TIMINGS,
    "JOBSVC_SCHEDULER_QUEUED_TIMEOUT_SECONDS": "3",
    "JOBSVC_SIGNUP_THROTTLE_RATE": "1000/min",
    "JOBSVC_LOGIN_THROTTLE_RATE": "1000/min",
    "JOBSVC_API_WORKERS": "2",
}
# The shard server's tmpfs: ample room for its data and WAL through a campaign (73 MiB
# were used near the end of a full one), little enough to fill in a moment.
SMALL_DISK_MB = 512


class System:
    """`start()` the stack and the apps; `stop()` everything (idempotent)."""

    def __init__(
        self,
        *,
        replicas: int,
        timings: dict[str, str] | None = None,
        schedulers: int = 2,
        executors: int = 2,
    ) -> None:
        self.root: Path = new_stack_dir("jobsvc-chaos-")
        self.replicas = replicas
        self.timings = {**FAST_TIMINGS, **(timings or {})}
        self.stack: Stack | None = None
        self.api_url = ""
        self._counts = (schedulers, executors)
        self._specs: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {}
        self.apps: dict[str, WorkerProcess] = {}
        # Why partitions and a full disk cannot be made here; None when they can.
        self.unavailable = {"partition": firewall.available(), "full disk": disk.available()}
        self.firewall: Firewall | None = None
        self.small_disk: SmallDisk | None = None
        self._groups: dict[str, int] = {}  # app -> gid, with a firewall

    # --- life cycle ---------------------------------------------------------------------

    def start(self) -> None:
        stack = build_test_stack(self.root, replicas=self.replicas)
        self.stack = stack
        if self.unavailable["full disk"] is None:
            self.small_disk = SmallDisk(self.shard_server.root, size_mb=SMALL_DISK_MB)
            self.small_disk.mount()  # before the server's initdb
        stack.start()
        stack.write_manifest(self.root / MANIFEST_FILE)
        if self.unavailable["partition"] is None:
            self.firewall = Firewall()
        run_commands(
            SETUP_COMMANDS, repo=REPO, env=self.stack.process_env(), logs_dir=self.logs_dir
        )
        port = free_port()
        self.api_url = f"http://{LOOPBACK}:{port}"
        schedulers, executors = self._counts
        for spec in app_specs(
            repo=REPO,
            api_bind=f"{LOOPBACK}:{port}",
            control_socket=self.root / "run" / "gunicorn.ctl",
            schedulers=schedulers,
            executors=executors,
        ):
            self._specs[spec.name] = (spec.argv, {**self.timings, **spec.env})
            if self.firewall is not None:
                self._groups[spec.name] = app_group(spec.name)
                self.firewall.mark_connections(self._groups[spec.name])
            self.start_app(spec.name)
        self.wait_for_api()

    def stop(self) -> None:
        """Apps, then servers, then the firewall's rules and the tmpfs (idempotent)."""
        try:
            for app in self.apps.values():
                app.stop()
            if self.stack is not None:
                self.stack.stop()
        finally:
            if self.firewall is not None:
                self.firewall.close()
            if self.small_disk is not None:
                self.small_disk.unmount()

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    # --- app processes ------------------------------------------------------------------

    def app_names(self, kind: str) -> list[str]:
        return [name for name in self._specs if name.startswith(kind)]

    def start_app(self, name: str, *, env: dict[str, str] | None = None) -> None:
        """(Re)start an app: an old process of that name is stopped first. `env` is added to
        this start's environment only (a restart without it drops it)."""
        argv, extra = self._specs[name]
        assert self.stack is not None
        old = self.apps.get(name)
        if old is not None:
            old.stop(timeout=5)  # closes its log; the new process appends after it
        self.apps[name] = WorkerProcess(
            kind=name.split("-")[0],
            name=name,
            env=self.stack.process_env({**extra, **(env or {})}),
            log_dir=self.logs_dir,
            argv=list(argv),
            append=True,
            group=self._groups.get(name),
        )

    def signal_app(self, name: str, signum: int) -> None:
        """Send `signum` to the app's whole process group."""
        pid = self.apps[name].pid
        try:
            os.killpg(pid, signum)
        except ProcessLookupError:
            logger.warning("%s (pid %d) is gone already", name, pid)
        if signum == signal.SIGKILL:
            self.apps[name].process.wait(timeout=10)

    def wait_for_api(self) -> None:
        if not poll_until(lambda: http_ok(f"{self.api_url}/healthz"), timeout=API_READY_TIMEOUT):
            raise RuntimeError(f"the API did not answer within {API_READY_TIMEOUT:.0f}s")

    # --- the network ----------------------------------------------------------------------

    def cut(self, app: str, server: Server) -> None:
        """Drop every packet between `app` and `server` (connections hang half-open)."""
        assert self.firewall is not None, self.unavailable["partition"]
        self.firewall.cut(self._groups[app], server.port)

    def heal_cut(self, app: str, server: Server) -> None:
        assert self.firewall is not None
        self.firewall.heal(self._groups[app], server.port)

    def cut_every_app(self, server: Server) -> None:
        """Every app cut off from `server` at once: to them, its host vanished."""
        for app in self._groups:
            self.cut(app, server)

    def heal_every_app(self, server: Server) -> None:
        for app in self._groups:
            self.heal_cut(app, server)

    # --- servers ------------------------------------------------------------------------

    @property
    def shard_server(self):
        """The PostgreSQL server holding shards only (2-3), not the control database."""
        assert self.stack is not None
        return self.stack.postgres[-1]

    def shards_on(self, server) -> list[int]:
        assert self.stack is not None
        return [i for i in range(self.stack.shards) if shard_database(i) in server.databases]

    def shards_off(self, server) -> list[int]:
        """The shards on the other servers."""
        assert self.stack is not None
        on = set(self.shards_on(server))
        return [i for i in range(self.stack.shards) if i not in on]

    def ensure_topics(self) -> None:
        """Create the topics the workers use, where missing (idempotent)."""
        assert self.stack is not None
        run_commands(
            [ENSURE_TOPICS], repo=REPO, env=self.stack.process_env(), logs_dir=self.logs_dir
        )

    def cut_every_session(self) -> int:
        """pg_terminate_backend on every client session of every primary; how many."""
        assert self.stack is not None
        ended = 0
        for server in self.stack.postgres:
            if not server.is_running():
                continue
            with server.connect() as conn:
                ended += len(
                    conn.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
                    ).fetchall()
                )
        return ended

    def shard_urls(self) -> list[str]:
        assert self.stack is not None
        return [self.stack.database_url(shard_database(i)) for i in range(self.stack.shards)]

    def shard_connection(self, shard: int) -> psycopg.Connection:
        return psycopg.connect(self.shard_urls()[shard], autocommit=True, connect_timeout=3)
