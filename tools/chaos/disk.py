"""A small disk for one server: a tmpfs the campaign mounts where the server keeps its
files, and fills up with a file of its own, then frees, to run the server out of space.

The mount's source is the campaign's tag (`leftovers`), so that a mount left by a campaign
that died is unmounted by the next one (`unmount_leftovers`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import subprocess
from pathlib import Path

from . import leftovers

logger = logging.getLogger(__name__)

FILL_NAME = "chaos-fill"  # the file that takes up the space, beside the server's files
WRITE_CHUNK = 1024 * 1024  # bytes written at a time once fallocate has taken the rest


def available() -> str | None:
    """None when a tmpfs can be mounted here, else why not."""
    if os.geteuid() != 0:
        return "a full disk needs root (it mounts a tmpfs)"
    return None


class SmallDisk:
    """`size_mb` of tmpfs mounted at `path`; `fill()` takes every free byte, `free()`
    gives them back."""

    def __init__(self, path: Path, *, size_mb: int) -> None:
        self.path = path
        self.size_mb = size_mb
        self._fill = path / FILL_NAME
        self._source = leftovers.tag()
        self._mounted = False

    def mount(self) -> None:
        unmount_leftovers()
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0755", self._source,
             str(self.path)],
            check=True, capture_output=True,
        )  # fmt: skip
        self._mounted = True
        logger.info("%s: a %d MiB tmpfs", self.path, self.size_mb)

    def fill(self) -> int:
        """Take every free byte; how many were free."""
        free = self.free_bytes()
        with open(self._fill, "wb") as out:
            with contextlib.suppress(OSError):
                os.posix_fallocate(out.fileno(), 0, free)
            out.seek(0, os.SEEK_END)
            try:
                while True:  # what fallocate left (tmpfs counts in pages)
                    out.write(b"\0" * WRITE_CHUNK)
                    out.flush()
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
        return free

    def free(self) -> None:
        self._fill.unlink(missing_ok=True)

    def free_bytes(self) -> int:
        stats = os.statvfs(self.path)
        return stats.f_bavail * stats.f_frsize

    def used_bytes(self) -> int:
        stats = os.statvfs(self.path)
        return (stats.f_blocks - stats.f_bfree) * stats.f_frsize

    def unmount(self) -> None:
        """Unmount (lazily if still busy); the files on it are gone. Idempotent."""
        if self._mounted:
            _unmount(self.path)
            self._mounted = False


def unmount_leftovers() -> None:
    """Unmount the tmpfs of campaigns that are no longer running."""
    for line in Path("/proc/mounts").read_text().splitlines():
        source, target, *_ = line.split()
        if leftovers.left_behind(source):
            logger.warning("unmounting %s, left by a campaign that died", target)
            _unmount(Path(target.replace("\\040", " ")))


def _unmount(path: Path) -> None:
    result = subprocess.run(["umount", str(path)], capture_output=True, text=True)
    if result.returncode != 0:
        subprocess.run(["umount", "--lazy", str(path)], capture_output=True, text=True)
