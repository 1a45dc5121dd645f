"""A standalone ZooKeeper server of the local stack (Debian's `zookeeper` package).

Files under `root`: `zoo.cfg` (rewritten on every start, so a resumed stack may move to
another port) and `data/` (snapshots and transaction logs, kept across restarts).

The server class runs in the foreground under `java`, as Debian's `zkServer.sh
start-foreground` would run it. The classpath is Debian's `zookeeper.jar`, whose manifest
`Class-Path` lists its dependencies in /usr/share/java, plus the slf4j-simple provider so
the server logs to stderr (without a provider ZooKeeper logs nothing at all).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from .errors import BinaryNotFound
from .java import java, native_heap_trim
from .probes import zookeeper_ruok
from .server import Server

JAVA_SHARE = Path("/usr/share/java")  # Debian's jar directory
ZOOKEEPER_JAR = JAVA_SHARE / "zookeeper.jar"
SLF4J_PROVIDER_JAR = JAVA_SHARE / "slf4j-simple.jar"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"  # standalone, no quorum
TICK_TIME_MS = 2000  # sessions time out between 2 and 20 ticks (4 s to 40 s)
# -Xms and -Xmx: a development ZooKeeper holds a few thousand znodes at most. The whole heap
# is committed and touched at start (as Kafka's own scripts fix -Xms to -Xmx), so the
# process's memory does not creep up as the collector grows the heap; native memory freed
# is trimmed (``native_heap_trim``).
HEAP_MB = 128
SNAPSHOTS_KEPT = 3  # autopurge keeps this many snapshots (and their logs)
PURGE_INTERVAL_HOURS = 1


class ZooKeeperServer(Server):
    """One standalone ZooKeeper on 127.0.0.1; ready once it answers `ruok` with `imok`."""

    kind: ClassVar[str] = "zookeeper"
    ready_timeout: ClassVar[float] = 60.0

    def __init__(
        self,
        *,
        root: Path,
        port: int,
        name: str = "zookeeper",
        log_path: Path | None = None,
        pid_file: Path | None = None,
        tick_time_ms: int = TICK_TIME_MS,
    ) -> None:
        super().__init__(name=name, root=root, port=port, log_path=log_path, pid_file=pid_file)
        self.data_dir = root / "data"
        self.config_path = root / "zoo.cfg"
        self.tick_time_ms = tick_time_ms

    @property
    def hosts(self) -> str:
        """The connection string clients use (`JOBSVC_ZK_HOSTS`)."""
        return self.address

    def _prepare(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        settings = {
            "tickTime": self.tick_time_ms,
            "dataDir": self.data_dir,
            "clientPort": self.port,
            "clientPortAddress": self.host,
            # Every worker and test connects from 127.0.0.1: no per-address cap (default 60).
            "maxClientCnxns": 0,
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "ruok,srvr,mntr",
            "autopurge.snapRetainCount": SNAPSHOTS_KEPT,
            "autopurge.purgeInterval": PURGE_INTERVAL_HOURS,
        }
        self.config_path.write_text(
            "# Written by tools/devstack on every start; edits are lost.\n"
            + "".join(f"{key}={value}\n" for key, value in settings.items())
        )

    def _argv(self) -> list[str]:
        return [
            java(),
            f"-Xms{HEAP_MB}m",
            f"-Xmx{HEAP_MB}m",
            "-XX:+AlwaysPreTouch",
            *native_heap_trim(),
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.net.preferIPv4Stack=true",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSZ",
            "-cp",
            classpath(),
            MAIN_CLASS,
            str(self.config_path),
        ]

    def _is_ready(self) -> bool:
        return zookeeper_ruok(self.host, self.port)


def classpath() -> str:
    """ZooKeeper's classpath on Debian (dependencies come from the jar's manifest)."""
    if not ZOOKEEPER_JAR.exists():
        raise BinaryNotFound(f"{ZOOKEEPER_JAR} not found (run `make bootstrap`)")
    jars = [ZOOKEEPER_JAR]
    if SLF4J_PROVIDER_JAR.exists():
        jars.append(SLF4J_PROVIDER_JAR)
    return ":".join(str(jar) for jar in jars)
