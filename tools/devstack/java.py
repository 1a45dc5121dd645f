"""The Java runtime ZooKeeper and Kafka run on (Debian's default-jre-headless, or any JDK 17+)."""

from __future__ import annotations

import functools
import shutil
import subprocess

from .errors import BinaryNotFound

# Native memory the JVM frees (its JIT compilers' arenas, mostly) stays with the C library
# and in the process's resident memory until trimmed: without this an idle ZooKeeper grew
# 7-10 MiB in its first minutes, freed again by one trim. JDK 17.0.9 and later trim on
# this interval (ms); an older runtime goes without.
NATIVE_HEAP_TRIM = "-XX:TrimNativeHeapInterval=10000"
PROBE_TIMEOUT = 30.0  # seconds for `java -version`


def java() -> str:
    """The `java` on PATH."""
    found = shutil.which("java")
    if found is None:
        raise BinaryNotFound("`java` not found on PATH (run `make bootstrap`)")
    return found


@functools.cache
def native_heap_trim() -> tuple[str, ...]:
    """The option that trims the native heap periodically, if this runtime has it."""
    probe = subprocess.run(
        [java(), NATIVE_HEAP_TRIM, "-version"],
        capture_output=True,
        timeout=PROBE_TIMEOUT,
        check=False,
    )
    return (NATIVE_HEAP_TRIM,) if probe.returncode == 0 else ()
