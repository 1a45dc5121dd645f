"""The owner of a stack's processes: it watches them and stops them in a fixed order.

Servers (PostgreSQL, ZooKeeper, the Kafka broker) are registered before they start; app
processes (the API, scheduler and executor workers) are started through the supervisor.
`watch` returns as soon as any of them exits on its own, so the launcher can say so
loudly and stop the rest. `stop` is idempotent and returns at once when a stop is already
under way, so it is safe to call from a signal handler or a `finally` block.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from .parallel import run_in_parallel
from .process import ManagedProcess
from .server import Server

logger = logging.getLogger(__name__)

APP_STOP_TIMEOUT = 30.0  # seconds an app process gets to drain after SIGTERM (> gunicorn's 20)
WATCH_INTERVAL = 0.5  # seconds between checks that every process still runs

# Servers stop in this order, after every app process has exited:
# 1. Kafka first: its clients are gone, so nothing reconnects or retries while it goes.
# 2. ZooKeeper next: worker sessions are already closed, so no ephemeral node expires late.
# 3. PostgreSQL last: every process above may write to it until it has exited.
SERVER_STOP_ORDER = ("kafka", "zookeeper", "postgres")


class Supervisor:
    """Holds the servers and app processes of one stack."""

    def __init__(self) -> None:
        self._servers: list[Server] = []
        self._apps: list[ManagedProcess] = []
        self._stop_lock = threading.Lock()
        self.stopping = False

    @property
    def servers(self) -> Sequence[Server]:
        return tuple(self._servers)

    @property
    def apps(self) -> Sequence[ManagedProcess]:
        return tuple(self._apps)

    def add_server(self, server: Server) -> None:
        if server.kind not in SERVER_STOP_ORDER:
            raise ValueError(f"no stop order for servers of kind {server.kind!r}")
        self._servers.append(server)

    def start_app(
        self,
        *,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path,
        pid_file: Path | None = None,
    ) -> ManagedProcess:
        """Start an app process; it is watched and stopped with the stack."""
        if self.stopping:
            raise RuntimeError("the stack is stopping")
        process = ManagedProcess(
            name=name, argv=argv, log_path=log_path, env=env, cwd=cwd, pid_file=pid_file
        )
        self._apps.append(process)
        process.start()
        logger.info("started %s (pid %d), log %s", name, process.pid, log_path)
        return process

    def exited(self) -> list[ManagedProcess]:
        """Processes of the stack that are no longer running."""
        processes = [s.process for s in self._servers if s.process is not None]
        return [p for p in [*processes, *self._apps] if not p.is_running()]

    def watch(self, *, interval: float = WATCH_INTERVAL) -> ManagedProcess:
        """Block until a process exits on its own; return it.

        Returns only on a death: a signal reaches the caller as an exception raised by its
        handler while this sleeps.
        """
        while True:
            exited = self.exited()
            if exited:
                return exited[0]
            time.sleep(interval)

    def stop(self) -> None:
        """Stop everything, apps first, then servers in `SERVER_STOP_ORDER`."""
        if not self._stop_lock.acquire(blocking=False):
            return  # a stop is under way (or done): never wait for it, we may be inside it
        self.stopping = True
        started = time.monotonic()
        # App processes first, all at once: each drains its in-flight work in parallel,
        # bounded by one timeout, then is killed with its process group.
        run_in_parallel(
            [
                (app.name, _quietly(app.name, lambda app=app: app.stop(timeout=APP_STOP_TIMEOUT)))
                for app in reversed(self._apps)
            ]
        )
        for kind in SERVER_STOP_ORDER:
            servers = [s for s in self._servers if s.kind == kind]
            run_in_parallel([(s.name, _quietly(s.name, s.stop)) for s in servers])
        logger.info("stack stopped in %.1fs", time.monotonic() - started)


def _quietly(name: str, stop: Callable[[], object]) -> Callable[[], None]:
    """A stop step that logs its error instead of raising: one failure stops nothing else."""

    def step() -> None:
        try:
            stop()
        except Exception:
            logger.exception("stopping %s failed", name)

    return step
