"""The CLI's saved session: API address and token in a JSON file only its owner can read."""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from jobsvc_client.models import Token, parse_time

TOKEN_FILE_ENV = "JOBSVC_TOKEN_FILE"
FILE_MODE = 0o600  # owner read/write only: the file holds a bearer token


@dataclass(frozen=True)
class Session:
    url: str
    token: Token


def default_path() -> Path:
    if explicit := os.environ.get(TOKEN_FILE_ENV):
        return Path(explicit)
    config = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(config) / "jobsvc" / "token.json"


def session_load(path: Path) -> Session | None:
    try:
        data = json.loads(path.read_text())
        return Session(data["url"], Token(data["token"], parse_time(data["expire"])))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a saved jobsvc session ({exc}); log in again") from exc


def session_save(path: Path, session: Session) -> None:
    """Write atomically; the file is created 0600, never readable by others even briefly."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # A name nobody can have prepared, opened only if it does not exist (O_EXCL) and never
    # through a symbolic link (O_NOFOLLOW): safe in a directory others can write to.
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    body = {
        "url": session.url,
        "token": session.token.token,
        "expire": session.token.expire.isoformat(),
    }
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    descriptor = os.open(temporary, flags, FILE_MODE)
    try:
        with os.fdopen(descriptor, "w") as file:
            json.dump(body, file)
        os.chmod(temporary, FILE_MODE)  # O_CREAT's mode is masked by the umask; make it exact
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
