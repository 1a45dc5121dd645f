"""The owner of a stack's processes: it watches them, restarts workers, stops them in order.

Servers (PostgreSQL, ZooKeeper, the Kafka broker) are registered before they start; app
processes (the API, scheduler and executor workers) are started through the supervisor.
`watch` runs until the stack must stop:

- an app process that exits on its own (a crash, an operator's `kill -9`) is restarted
  after a backoff, with a loud log line, as a process manager would (`restarts`);
- an app process in a crash loop, or any server that exits, ends the watch with a
  `StackFailure`, so the launcher can say so loudly and stop the rest.

`stop` is idempotent and returns at once when a stop is already under way, so it is safe
to call from a signal handler or a `finally` block. A restart and a stop exclude each
other: once `stop` has begun, nothing is started again.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from .parallel import run_in_parallel
from .process import ManagedProcess
from .restarts import CrashLoop, Restart, RestartPolicy
from .server import Server

logger = logging.getLogger(__name__)

APP_STOP_TIMEOUT = 30.0  # seconds an app process gets to drain after SIGTERM (> gunicorn's 20)
WATCH_INTERVAL = 0.5  # seconds between checks that every process still runs
RESTART_LOG_TAIL_LINES = 20  # lines of a restarted process's log quoted in the warning

# Servers stop in this order, after every app process has exited:
# 1. Kafka first: its clients are gone, so nothing reconnects or retries while it goes.
# 2. ZooKeeper next: worker sessions are already closed, so no ephemeral node expires late.
# 3. PostgreSQL last: every process above may write to it until it has exited.
# 4. Its standbys after it: a primary's shutdown sends them its last WAL (the shutdown
#    checkpoint) first, and while it runs its commits wait for a synchronous standby.
SERVER_STOP_ORDER = ("kafka", "zookeeper", "postgres", "postgres-standby")


@dataclass(frozen=True)
class StackFailure:
    """Why the stack must stop: the process that exited, and why it is not restarted."""

    process: ManagedProcess
    reason: str


class Supervisor:
    """Holds the servers and app processes of one stack."""

    def __init__(self, *, restarts: RestartPolicy | None = None) -> None:
        self._servers: list[Server] = []
        self._apps: list[ManagedProcess] = []
        self._restarts = restarts if restarts is not None else RestartPolicy()
        self._stop_lock = threading.Lock()
        # Held while the app list changes (a restart) and while `stop` takes its copy.
        self._apps_lock = threading.Lock()
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
        process = ManagedProcess(
            name=name, argv=argv, log_path=log_path, env=env, cwd=cwd, pid_file=pid_file
        )
        with self._apps_lock:
            if self.stopping:
                raise RuntimeError("the stack is stopping")
            self._apps.append(process)
            process.start()
        logger.info("started %s (pid %d), log %s", name, process.pid, log_path)
        return process

    def exited(self) -> list[ManagedProcess]:
        """Processes of the stack that are no longer running."""
        processes = [s.process for s in self._servers if s.process is not None]
        return [p for p in [*processes, *self._apps] if not p.is_running()]

    def watch(
        self,
        *,
        interval: float = WATCH_INTERVAL,
        shielded: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
    ) -> StackFailure | None:
        """Restart app processes that exit, until the stack must stop; say why.

        Returns a `StackFailure` when a server exits or an app process is in a crash loop,
        None when `stop` was called (from another thread). A signal reaches the caller as
        an exception raised by its handler while this sleeps. Each restart runs inside
        `shielded()`, which the launcher uses to hold back a Ctrl-C until the new process
        is registered, so that `stop` stops it.
        """
        due: dict[str, float] = {}  # app name -> monotonic time of its restart
        while not self.stopping:
            for server in self._servers:
                if server.process is not None and not server.process.is_running():
                    return StackFailure(server.process, "servers are not restarted")
            for app in self.apps:
                if app.name in due or app.is_running():
                    continue
                decision = self._restarts.on_exit(app.name)
                app.release()
                if isinstance(decision, CrashLoop):
                    return StackFailure(app, str(decision))
                self._log_exit(app, decision)
                due[app.name] = time.monotonic() + decision.delay
            for name, at in list(due.items()):
                if time.monotonic() >= at:
                    del due[name]
                    with shielded():
                        self._restart(name)
            time.sleep(interval)
        return None

    def _restart(self, name: str) -> None:
        with self._apps_lock:
            if self.stopping:
                return
            index = next(i for i, app in enumerate(self._apps) if app.name == name)
            process = self._apps[index].renewed()
            self._apps[index] = process
            process.start()
        logger.warning("restarted %s (pid %d)", name, process.pid)

    def _log_exit(self, process: ManagedProcess, restart: Restart) -> None:
        """The loud part: which process, how it ended, which restart, when, and its last words."""
        logger.warning(
            "\n%s\n%s (pid %s) %s: restart %d in %.1f s "
            "(%d exits within %.0f s stop the stack). Last lines of %s:\n%s\n%s",
            "!" * 78,
            process.name,
            process.pid,
            process.describe_exit(),
            restart.number,
            restart.delay,
            self._restarts.crash_loop_exits,
            self._restarts.crash_loop_window,
            process.log_path,
            process.log_tail(RESTART_LOG_TAIL_LINES),
            "!" * 78,
        )

    def stop(self) -> None:
        """Stop everything, apps first, then servers in `SERVER_STOP_ORDER`."""
        if not self._stop_lock.acquire(blocking=False):
            return  # a stop is under way (or done): never wait for it, we may be inside it
        with self._apps_lock:  # a restart under way finishes first; none starts after
            self.stopping = True
            apps = list(self._apps)
        started = time.monotonic()
        # App processes first, all at once: each drains its in-flight work in parallel,
        # bounded by one timeout, then is killed with its process group.
        run_in_parallel(
            [
                (app.name, _quietly(app.name, lambda app=app: app.stop(timeout=APP_STOP_TIMEOUT)))
                for app in reversed(apps)
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
