"""The chaos campaign's small disk (tools/chaos/disk.py): a tmpfs that `fill()` leaves
without a free byte and `free()` gives back; a mount left by a campaign that died is
unmounted by the next."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import pytest

from tools.chaos import disk
from tools.chaos.disk import SmallDisk

pytestmark = pytest.mark.skipif(disk.available() is not None, reason="needs root")

# A campaign that mounts its disk and dies without unmounting it.
DIES_MOUNTED = """
import os, signal, sys
from pathlib import Path
from tools.chaos.disk import SmallDisk
SmallDisk(Path(sys.argv[1]), size_mb=1).mount()
os.kill(os.getpid(), signal.SIGKILL)
"""


def mounted(path: Path) -> bool:
    return any(
        line.split()[1] == str(path) for line in Path("/proc/mounts").read_text().splitlines()
    )


def test_a_filled_disk_refuses_writes_until_freed(tmp_path):
    small = SmallDisk(tmp_path / "disk", size_mb=4)
    small.mount()
    try:
        assert small.fill() == 4 * 2**20
        with pytest.raises(OSError) as full, open(small.path / "data", "wb") as out:
            out.write(b"x" * 65536)
            out.flush()
        assert full.value.errno == errno.ENOSPC

        small.free()

        (small.path / "data").write_bytes(b"x" * 65536)
    finally:
        small.unmount()
    assert not mounted(small.path)


def test_the_disk_of_a_campaign_that_died_is_unmounted_by_the_next(tmp_path):
    path = tmp_path / "left"
    subprocess.run([sys.executable, "-c", DIES_MOUNTED, str(path)], check=False)
    assert mounted(path)

    disk.unmount_leftovers()

    assert not mounted(path)
