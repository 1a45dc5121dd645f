"""Test helpers for the coordination package: waiting, a callback log, a fault proxy and a
private ZooKeeper server.

Nothing here fakes kazoo or ZooKeeper: the proxy forwards real bytes (and can cut the link,
like Toxiproxy's `down`), the private server is Debian's ZooKeeper.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.waiting import wait_until
from tools.bench.processes import stopped_with_parent

# -- what the workers were told ------------------------------------------------------------


@dataclass
class OwnershipLog:
    """Callbacks of several ShardOwnership instances, in the order they ran.

    Each worker's `on_released` runs before it deletes the owner node, and the next owner's
    `on_acquired` runs after its create succeeded, so if ownership is exclusive this log
    never shows a shard active in two workers at once.
    """

    entries: list[tuple[str, str, int | None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, worker: str, kind: str, shard_id: int | None = None) -> None:
        with self._lock:
            self.entries.append((worker, kind, shard_id))

    def of(self, worker: str) -> list[tuple[str, int | None]]:
        with self._lock:
            return [(kind, shard) for who, kind, shard in self.entries if who == worker]

    def active_overlaps(self) -> list[str]:
        """Moments where a shard was active (owned and not suspended) in two workers."""
        owned: dict[str, set[int]] = {}
        paused: set[str] = set()
        problems = []
        with self._lock:
            entries = list(self.entries)
        for index, (worker, kind, shard_id) in enumerate(entries):
            if kind == "suspended":
                paused.add(worker)
            elif kind == "resumed":
                paused.discard(worker)
            elif kind == "released":
                owned.setdefault(worker, set()).discard(shard_id)
            elif kind == "acquired":
                others = [
                    other
                    for other, shards in owned.items()
                    if other != worker and other not in paused and shard_id in shards
                ]
                if others:
                    problems.append(f"entry {index}: {worker} acquired {shard_id} held by {others}")
                owned.setdefault(worker, set()).add(shard_id)
        return problems


@dataclass
class Recorder:
    """The four callbacks of one worker, writing to a shared log."""

    worker: str
    log: OwnershipLog

    def callbacks(self) -> dict[str, Callable]:
        return {
            "on_acquired": lambda shard_id: self.log.add(self.worker, "acquired", shard_id),
            "on_released": lambda shard_id: self.log.add(self.worker, "released", shard_id),
            "on_suspended": lambda: self.log.add(self.worker, "suspended"),
            "on_resumed": lambda: self.log.add(self.worker, "resumed"),
        }

    def events(self) -> list[tuple[str, int | None]]:
        return self.log.of(self.worker)

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events()]


# -- a TCP proxy that can cut the link ------------------------------------------------------


class FaultProxy:
    """Forwards 127.0.0.1:<port> to an upstream address until `cut()`; `restore()` undoes it.

    While cut, open connections are shut down and new ones are accepted and closed at once,
    so the client sees its connection drop and every reconnect fail, as in a partition.
    """

    ACCEPT_TIMEOUT = 0.1  # seconds; how often the accept loop checks for close()

    def __init__(self, upstream: str) -> None:
        host, port = upstream.split(",")[0].rsplit(":", 1)
        self._upstream = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(self.ACCEPT_TIMEOUT)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._links: set[socket.socket] = set()
        self._up = True
        self._closed = False
        self._threads = [threading.Thread(target=self._accept_loop, daemon=True)]
        self._threads[0].start()

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cut(self) -> None:
        with self._lock:
            self._up = False
            links, self._links = self._links, set()
        for sock in links:
            _shut(sock)

    def restore(self) -> None:
        with self._lock:
            self._up = True

    def close(self) -> None:
        self._closed = True
        self.cut()
        for thread in self._threads:
            thread.join(timeout=5)
        self._listener.close()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                downstream, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            downstream.settimeout(None)
            with self._lock:
                up = self._up
            if not up:
                _shut(downstream)
                continue
            try:
                upstream = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                _shut(downstream)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._links.update((downstream, upstream))
            for src, dst in ((downstream, upstream), (upstream, downstream)):
                pump = threading.Thread(target=_pump, args=(src, dst), daemon=True)
                self._threads.append(pump)
                pump.start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        _shut(src)
        _shut(dst)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


# -- a private ZooKeeper server (Debian's package) ------------------------------------------

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")  # its manifest lists the dependencies
SLF4J_PROVIDER_JAR = Path("/usr/share/java/slf4j-simple.jar")  # so the server logs at all
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
PRIVATE_TICK_MS = 500  # sessions may be 1-10 s
SERVER_READY_TIMEOUT = 60.0  # seconds for the JVM to start and answer `ruok`


def private_zookeeper_missing() -> str | None:
    """Why a private ZooKeeper cannot be started here, or None if it can."""
    if shutil.which("java") is None:
        return "java is not on PATH"
    if not ZOOKEEPER_JAR.exists():
        return f"{ZOOKEEPER_JAR} is missing (Debian package `zookeeper`)"
    return None


class PrivateZooKeeper:
    """A standalone ZooKeeper a test may kill and restart (same port, same data)."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self.port = _free_port()
        self._process: subprocess.Popen | None = None
        (directory / "data").mkdir(parents=True)
        settings = {
            "tickTime": PRIVATE_TICK_MS,
            "minSessionTimeout": 2 * PRIVATE_TICK_MS,
            "maxSessionTimeout": 20 * PRIVATE_TICK_MS,
            "dataDir": directory / "data",
            "clientPort": self.port,
            "clientPortAddress": "127.0.0.1",
            "maxClientCnxns": 0,
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "ruok",
        }
        self._config = directory / "zoo.cfg"
        self._config.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        jars = (
            [ZOOKEEPER_JAR, SLF4J_PROVIDER_JAR] if SLF4J_PROVIDER_JAR.exists() else [ZOOKEEPER_JAR]
        )
        with (self._directory / "server.log").open("ab") as log:
            self._process = subprocess.Popen(
                stopped_with_parent(
                    [
                        "java",
                        "-Xmx256m",
                        "-Djava.net.preferIPv4Stack=true",
                        "-cp",
                        ":".join(map(str, jars)),
                        MAIN_CLASS,
                        str(self._config),
                    ]
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        wait_until(self._is_ready, timeout=SERVER_READY_TIMEOUT, what="private ZooKeeper ready")

    def kill(self) -> None:
        """SIGKILL the server, as a crash would."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait()
        self._process = None

    def wipe(self) -> None:
        """Delete the stopped server's data, as restoring a lost ZooKeeper from nothing would."""
        assert self._process is None, "kill the server first"
        shutil.rmtree(self._directory / "data")
        (self._directory / "data").mkdir()

    def _is_ready(self) -> bool:
        if self._process is not None and self._process.poll() is not None:
            raise AssertionError(f"ZooKeeper exited; see {self._directory / 'server.log'}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"ruok")
                return sock.recv(4) == b"imok"
        except OSError:
            return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
