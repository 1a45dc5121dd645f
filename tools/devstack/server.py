"""The common life cycle of an infrastructure server: prepare, start, wait until ready, stop.

Subclasses (`PostgresServer`, `ZooKeeperServer`, `KafkaBroker`) say how to prepare their
files, which command to run and how to tell they are ready. A server can be stopped and
started again on the same port and data (failure tests restart ZooKeeper this way).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self

from .errors import ServerStartError
from .polling import poll_until
from .ports import LOOPBACK
from .process import ManagedProcess, RunAs

logger = logging.getLogger(__name__)

SERVER_STOP_TIMEOUT = 15.0  # seconds between SIGTERM and SIGKILL for a server


class Server(ABC):
    """One server process on `host:port`, with its files under `root`."""

    kind: ClassVar[str]  # "postgres", "zookeeper", "kafka": the supervisor stops by kind
    ready_timeout: ClassVar[float]  # seconds from start until the server must answer
    stop_signal: ClassVar[int] = signal.SIGTERM  # asks the server to shut down cleanly

    def __init__(
        self,
        *,
        root: Path,
        port: int,
        name: str | None = None,
        log_path: Path | None = None,
        pid_file: Path | None = None,
    ) -> None:
        self.name = name if name is not None else self.kind
        self.root = root
        self.port = port
        self.host = LOOPBACK
        self.log_path = log_path if log_path is not None else root / f"{self.name}.log"
        self._pid_file = pid_file
        self._process: ManagedProcess | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def process(self) -> ManagedProcess | None:
        """The current process, None before the first `start`."""
        return self._process

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def is_running(self) -> bool:
        return self._process is not None and self._process.is_running()

    def start(self) -> None:
        """Start the server and return once it answers; raise `ServerStartError` if not."""
        if self.is_running():
            raise RuntimeError(f"{self.name} is already running")
        started = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        self._prepare()
        self._process = ManagedProcess(
            name=self.name,
            argv=self._argv(),
            log_path=self.log_path,
            env=self._env(),
            cwd=self.root,
            run_as=self._run_as(),
            pid_file=self._pid_file,
            stop_signal=self.stop_signal,
        )
        self._process.start()
        try:
            ready = poll_until(
                self._is_ready, timeout=self.ready_timeout, give_up=self._check_alive
            )
            if not ready:
                raise ServerStartError(
                    f"{self.name} did not answer on {self.address} within "
                    f"{self.ready_timeout:.0f}s; last lines of {self.log_path}:\n"
                    f"{self._process.log_tail()}"
                )
            self._after_ready()
        except BaseException:
            self.stop()
            raise
        logger.info(
            "%s ready on %s in %.1fs (pid %d)",
            self.name,
            self.address,
            time.monotonic() - started,
            self._process.pid,
        )

    def stop(self) -> None:
        """Stop the server if it runs; safe to call more than once."""
        if self._process is not None:
            self._process.stop(timeout=SERVER_STOP_TIMEOUT)

    def restart(self) -> None:
        self.stop()
        self.start()

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

    def _check_alive(self) -> None:
        assert self._process is not None
        code = self._process.returncode
        if code is not None:
            raise ServerStartError(
                f"{self.name} exited with code {code} while starting; last lines of "
                f"{self.log_path}:\n{self._process.log_tail()}"
            )

    def _prepare(self) -> None:
        """Create the files the server needs before it starts (config, data dir)."""
        return None

    def _env(self) -> dict[str, str]:
        return dict(os.environ)

    def _run_as(self) -> RunAs | None:
        return None

    def _after_ready(self) -> None:
        """Work to do once the server answers (create databases...)."""
        return None

    @abstractmethod
    def _argv(self) -> list[str]:
        """The command line that runs the server in the foreground."""

    @abstractmethod
    def _is_ready(self) -> bool:
        """True once the server answers its own protocol."""
