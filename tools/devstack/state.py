"""The state directory of `make run`: one place for data, logs, secrets and chosen ports.

Layout (under `<repo>/.state/` unless `--state-dir` says otherwise):

    state.json      shard count and ports, written at creation and updated on resume
    secrets.json    Django SECRET_KEY and the JWT signing key (mode 0600): tokens survive
                    a restart
    stack.env       `export` lines of the stack's environment: `set -a; . .state/stack.env`
    postgres/       PostgreSQL data dir (`data/`) and unix socket dir (`run/`)
    postgres-standby/   the same for its standby (`--replicas 1`), cloned on every start
    zookeeper/      ZooKeeper config and data
    kafka/          the Kafka broker's config and log dirs (topics, offsets, metadata)
    logs/           one log file per server, app process and management command
    run/            pid files of running children and the launcher's lock file

A launcher holds an exclusive lock on `run/launcher.lock` for its lifetime, so two
launchers never share a state dir, and leftovers found in `run/` are never a live
launcher's children.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import json
import logging
import os
import secrets
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import LocalStackError

logger = logging.getLogger(__name__)

SECRET_BYTES = 48  # random bytes per secret (64 URL-safe characters)
POSTGRES_SYSTEM_GROUP = "postgres"  # PostgreSQL runs as this group's user when we are root


@dataclass(frozen=True)
class Secrets:
    """The stack's signing keys."""

    secret_key: str
    jwt_signing_key: str

    @classmethod
    def generate(cls) -> Secrets:
        return cls(
            secret_key=secrets.token_urlsafe(SECRET_BYTES),
            jwt_signing_key=secrets.token_urlsafe(SECRET_BYTES),
        )


@dataclass
class PersistedState:
    """What a resumed run must keep: the shard count, and preferably the same ports."""

    shards: int
    ports: dict[str, int] = field(default_factory=dict)


class StateDir:
    """Paths inside one state directory, and its persisted files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state_file = root / "state.json"
        self.secrets_file = root / "secrets.json"
        self.env_file = root / "stack.env"
        self.postgres_root = root / "postgres"
        self.zookeeper_root = root / "zookeeper"
        self.kafka_root = root / "kafka"
        self.logs_dir = root / "logs"
        self.run_dir = root / "run"
        self._lock_file = self.run_dir / "launcher.lock"

    def create(self) -> None:
        """The state dir and its logs/ and run/, readable by this user only: the logs hold
        job messages (PostgreSQL's slow statements, app errors) and the data dirs hold
        every job. Under root, PostgreSQL runs as the `postgres` system user, which must
        pass through to its data dir: its group may enter (not list) the state dir."""
        for directory in (self.root, self.logs_dir, self.run_dir):
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o700)
        if os.geteuid() == 0:
            try:
                group = grp.getgrnam(POSTGRES_SYSTEM_GROUP).gr_gid
            except KeyError:
                return  # no PostgreSQL installed: nothing to let through
            os.chown(self.root, -1, group)
            self.root.chmod(0o710)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the state dir for this process; fail at once if another launcher does."""
        self.create()
        with open(self._lock_file, "a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.seek(0)
                holder = lock.read().strip() or "?"
                raise LocalStackError(
                    f"another launcher (pid {holder}) is using {self.root}; stop it first"
                ) from None
            lock.seek(0)
            lock.truncate()
            lock.write(f"{os.getpid()}\n")
            lock.flush()
            yield

    def load(self) -> PersistedState | None:
        """The persisted state, None for a new state dir."""
        if not self.state_file.exists():
            return None
        try:
            raw = json.loads(self.state_file.read_text())
            return PersistedState(shards=int(raw["shards"]), ports=dict(raw.get("ports", {})))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise LocalStackError(
                f"{self.state_file} is unreadable ({exc}); fix it or `make clean-state`"
            ) from exc

    def save(self, state: PersistedState) -> None:
        _write_atomically(self.state_file, json.dumps(asdict(state), indent=2) + "\n")

    def secrets(self) -> Secrets:
        """The persisted secrets, generated on first use."""
        if self.secrets_file.exists():
            try:
                stored = json.loads(self.secrets_file.read_text())
                missing = {
                    name: value
                    for name, value in asdict(Secrets.generate()).items()
                    if name not in stored
                }
                if missing:  # a state dir from an older version: add the new keys
                    stored.update(missing)
                    _write_atomically(self.secrets_file, json.dumps(stored) + "\n", mode=0o600)
                # Keys an older version kept and this one no longer uses are ignored.
                return Secrets(**{name: stored[name] for name in asdict(Secrets.generate())})
            except (OSError, ValueError, TypeError) as exc:
                raise LocalStackError(
                    f"{self.secrets_file} is unreadable ({exc}); delete it to get new keys "
                    "(existing tokens become invalid)"
                ) from exc
        generated = Secrets.generate()
        _write_atomically(self.secrets_file, json.dumps(asdict(generated)) + "\n", mode=0o600)
        return generated

    def write_env_file(self, env: Mapping[str, str]) -> None:
        """`stack.env`: the environment as shell `export` lines (it holds secrets: 0600)."""
        lines = [
            "# Environment of the running local stack, written by `make run`.",
            "# Load it with:  set -a; . .state/stack.env; set +a",
            *(f"export {key}={shlex.quote(value)}" for key, value in sorted(env.items())),
        ]
        _write_atomically(self.env_file, "\n".join(lines) + "\n", mode=0o600)


def _write_atomically(path: Path, text: str, *, mode: int = 0o644) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
