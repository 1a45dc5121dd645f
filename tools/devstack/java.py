"""The Java runtime ZooKeeper and Kafka run on (Debian's default-jre-headless, or any JDK 17+)."""

from __future__ import annotations

import shutil

from .errors import BinaryNotFound


def java() -> str:
    """The `java` on PATH."""
    found = shutil.which("java")
    if found is None:
        raise BinaryNotFound("`java` not found on PATH (run `make bootstrap`)")
    return found
