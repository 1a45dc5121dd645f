"""Partitions on one machine: iptables rules that drop an app's packets to and from one
server, so that its connections hang half-open instead of failing.

Each app process of the campaign runs with a group of its own (`app_group`), and a
standing rule marks every connection that group opens, from its first packet on. A cut of
the app from a server's port is then two rules, one per direction::

    OUTPUT  -m owner --gid-owner G -p tcp -d 127.0.0.1 --dport PORT -j DROP
    INPUT   -m connmark --mark G -p tcp -s 127.0.0.1 --sport PORT -j DROP

The first drops the app's requests, acknowledgements and new connections; the second the
server's replies and what it pushes unasked (a NOTIFY, a fetch's answer). Nothing is
refused or reset: the app learns of the cut only from its own timeouts, as when a network
drops packets. Both rules go again at the heal, and the connections carry on.

The app keeps uid 0 and changes only its group: the shared virtualenv's interpreter lives
under /root (mode 0700), which another user cannot reach, and the owner match needs only
a group of its own (`--gid-owner` matches the group of the socket's opener).

Every rule carries the campaign's tag (`leftovers`) as its comment: `close()` deletes
exactly the rules this firewall added, and `Firewall()` first deletes those of a campaign
that died without doing so.
"""

from __future__ import annotations

import grp
import logging
import os
import shlex
import shutil
import subprocess

from . import leftovers

logger = logging.getLogger(__name__)

IPTABLES = "iptables"
GROUP_PREFIX = "jobsvc-chaos-"  # + the app's name: a system group per app process
LOOPBACK = "127.0.0.1"


class FirewallError(RuntimeError):
    """An iptables command failed."""


def available() -> str | None:
    """None when partitions can be made here, else why not."""
    if os.geteuid() != 0:
        return "partitions need root (iptables, and a group per app process)"
    if shutil.which(IPTABLES) is None:
        return "partitions need iptables (`apt-get install iptables`; `make chaos` does)"
    return None


def app_group(app: str) -> int:
    """The gid of the system group `jobsvc-chaos-<app>`, created if missing."""
    name = GROUP_PREFIX + app
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        subprocess.run(["groupadd", "--system", name], check=True, capture_output=True)
        logger.info("created the system group %s (app %s runs with it)", name, app)
        return grp.getgrnam(name).gr_gid


class Firewall:
    """The campaign's iptables rules: connection marks per app group, cuts on demand."""

    def __init__(self) -> None:
        self._comment = leftovers.tag()
        self._added: list[tuple[str, list[str]]] = []  # (table, -A spec), in order
        self._cuts: dict[tuple[int, int], list[tuple[str, list[str]]]] = {}
        remove_leftovers()

    def mark_connections(self, gid: int) -> None:
        """Mark every connection the group opens from now on (needed before a cut)."""
        self._add("mangle", ["OUTPUT", "-m", "owner", "--gid-owner", str(gid),
                             "-j", "CONNMARK", "--set-mark", str(gid)])  # fmt: skip

    def cut(self, gid: int, port: int) -> None:
        """Drop every packet between the group's processes and `port` on the loopback."""
        if (gid, port) in self._cuts:
            return
        rules = [
            ("filter", ["OUTPUT", "-m", "owner", "--gid-owner", str(gid), "-p", "tcp",
                        "-d", LOOPBACK, "--dport", str(port), "-j", "DROP"]),
            ("filter", ["INPUT", "-m", "connmark", "--mark", str(gid), "-p", "tcp",
                        "-s", LOOPBACK, "--sport", str(port), "-j", "DROP"]),
        ]  # fmt: skip
        self._cuts[(gid, port)] = [(table, self._add(table, spec)) for table, spec in rules]

    def heal(self, gid: int, port: int) -> None:
        for table, spec in self._cuts.pop((gid, port), []):
            self._delete(table, spec)

    def close(self) -> None:
        """Delete every rule this firewall added (idempotent)."""
        for table, spec in reversed(list(self._added)):
            self._delete(table, spec)
        self._cuts.clear()

    def _add(self, table: str, spec: list[str]) -> list[str]:
        """Append the rule, with this campaign's comment; the spec as added."""
        spec = [*spec, "-m", "comment", "--comment", self._comment]
        _iptables(table, "-A", spec)
        self._added.append((table, spec))
        return spec

    def _delete(self, table: str, spec: list[str]) -> None:
        if (table, spec) not in self._added:
            return  # deleted already
        self._added.remove((table, spec))
        try:
            _iptables(table, "-D", spec)
        except FirewallError as exc:
            logger.warning("could not delete an iptables rule: %s", exc)


def remove_leftovers() -> int:
    """Delete the rules of campaigns that are no longer running; how many."""
    removed = 0
    for table in ("filter", "mangle"):
        listing = subprocess.run(
            [IPTABLES, "-w", "-t", table, "-S"], check=True, capture_output=True, text=True
        ).stdout
        for line in listing.splitlines():
            words = shlex.split(line)
            if not words or words[0] != "-A" or "--comment" not in words:
                continue
            if leftovers.left_behind(words[words.index("--comment") + 1]):
                _iptables(table, "-D", words[1:])
                removed += 1
    if removed:
        logger.warning("deleted %d iptables rules left by a campaign that died", removed)
    return removed


def _iptables(table: str, action: str, spec: list[str]) -> None:
    argv = [IPTABLES, "-w", "-t", table, action, *spec]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise FirewallError(f"{shlex.join(argv)}: {result.stderr.strip()}")
