"""The Apache Kafka jars of the local stack, fetched once from Maven Central and cached.

`kafka.pom.xml` pins the broker's version. `ensure_kafka_jars()` (run by `make bootstrap`)
asks Maven to copy those artifacts and their runtime dependencies into
`$JOBSVC_CACHE_DIR/kafka/<pom digest>/` (default `~/.cache/jobsvc`), with strict checksum
checks. The folder is outside the state dir and keyed by the POM's content, so a second
`make run` needs no network, and a new version lands beside the old one. A folder is
complete only once its marker file is written: an interrupted fetch is fetched again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .errors import BinaryNotFound, LocalStackError

logger = logging.getLogger(__name__)

POM = Path(__file__).with_name("kafka.pom.xml")
CACHE_DIR_ENV = "JOBSVC_CACHE_DIR"
COMPLETE_MARKER = ".complete"
FETCH_TIMEOUT = 900.0  # seconds Maven may take to download the broker (about 45 MB)


class KafkaJarsMissing(BinaryNotFound):
    """The broker's jars are not in the cache (run `make bootstrap`)."""


def cache_root() -> Path:
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "jobsvc"


def jars_dir() -> Path:
    """Where this POM's jars live (whether or not they were fetched yet)."""
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()[:16]
    return cache_root() / "kafka" / digest


def classpath() -> str:
    """The broker's Java classpath; raises `KafkaJarsMissing` before `make bootstrap`."""
    directory = jars_dir()
    if not (directory / COMPLETE_MARKER).exists():
        raise KafkaJarsMissing(
            f"the Kafka broker's jars are not in {directory} (run `make bootstrap`)"
        )
    return str(directory / "*")


def ensure_kafka_jars() -> Path:
    """Fetch the jars unless this POM's are cached already; return their folder."""
    directory = jars_dir()
    if (directory / COMPLETE_MARKER).exists():
        return directory
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BinaryNotFound("`mvn` not found on PATH: Maven fetches the Kafka broker")
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".fetching-", dir=directory.parent))
    logger.info("fetching the Kafka broker from Maven Central into %s", directory)
    argv = [
        mvn,
        "--batch-mode",
        "--quiet",
        "--strict-checksums",  # a jar whose checksum does not match fails the fetch
        "--file",
        str(POM),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={staging}",
        "-DincludeScope=runtime",
    ]
    try:
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=FETCH_TIMEOUT, check=False
        )
        if result.returncode != 0:
            raise LocalStackError(
                "Maven could not fetch the Kafka broker:\n"
                + (result.stdout + result.stderr)[-4000:]
            )
        (staging / COMPLETE_MARKER).write_text(POM.read_text())
        shutil.rmtree(directory, ignore_errors=True)
        staging.rename(directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory
