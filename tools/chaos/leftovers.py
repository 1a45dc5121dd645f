"""What a campaign leaves on the machine while it runs (iptables rules, tmpfs mounts) is
named after it, `jobsvc-chaos:pid=P,start=T` (its process id and kernel start time), so
that a later campaign can remove what one that died left behind, and nothing else."""

from __future__ import annotations

import os
import re
from pathlib import Path

PREFIX = "jobsvc-chaos:"
_TAG = re.compile(rf"^{PREFIX}pid=(\d+),start=(\d+)$")


def tag() -> str:
    """This campaign's name for what it leaves on the machine."""
    pid = os.getpid()
    return f"{PREFIX}pid={pid},start={_start_time(pid)}"


def left_behind(text: str) -> bool:
    """Whether `text` is the tag of a campaign that no longer runs (False: not a tag)."""
    match = _TAG.match(text)
    return match is not None and _start_time(int(match[1])) != int(match[2])


def _start_time(pid: int) -> int:
    """The process's start time in clock ticks since boot; 0 if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[19])
