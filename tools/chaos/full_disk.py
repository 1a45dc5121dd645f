"""The full-disk fault: the server of shards 2-3 (data and WAL on a small tmpfs) runs out
of space for `DISK_FULL_SECONDS`, then gets it back.

While the disk is full, a bulk create touching those shards must answer 503 (each of up
to `PROBES` tries, one after the other: a create may still fit in pages the tables and
indexes have free, and is then kept; the tries use those pages up), and
the other server's shards must go on running jobs. At the heal the file is deleted; a
server that crashed meanwhile (PostgreSQL stops when it cannot write its WAL), or that
does not answer within `RECOVERY_SECONDS`, is started again, as an operator would, and
the report says so.
"""

from __future__ import annotations

import logging
import time

import psycopg

from tools.devstack.polling import poll_until

from .faults import Check, Fault
from .probes import Observers, ProbeAnswer, answered_unavailable
from .system import System

logger = logging.getLogger(__name__)

DISK_FULL_SECONDS = 12.0
PROBE_AFTER = 1.0  # seconds after the disk fills before the first bulk create
PROBES = 10  # bulk creates at most, while they are acknowledged
RECOVERY_SECONDS = 10.0  # for the server to answer again once the space is back


def full_disk(server: str) -> Fault:
    """`server` is the name of the shard server (`System.shard_server`)."""
    return Fault(
        name="fill shard db disk",
        what=f"the tmpfs holding the data and WAL of shards 2-3 filled for "
        f"{DISK_FULL_SECONDS:g} s, then freed",
        inject=_fill,
        heal=_free,
        hold=DISK_FULL_SECONDS,
        targets=frozenset({server, "api"}),  # its check asks the API
        during=_checks,
        during_after=PROBE_AFTER,
    )


def _fill(system: System) -> str:
    assert system.small_disk is not None, system.unavailable["full disk"]
    used = system.small_disk.used_bytes()
    free = system.small_disk.fill()
    return f"{used / 2**20:.0f} MiB used, {free / 2**20:.0f} MiB filled"


def _checks(system: System, observers: Observers, injected_at: float) -> list[Check]:
    answers: list[ProbeAnswer] = []
    while len(answers) < PROBES and (not answers or answers[-1].status == 201):
        answers.append(observers.probe.bulk_create())
    unavailable = answered_unavailable(answers[-1], what="bulk create touching shards 2-3")
    if len(answers) > 1:
        tries = ", ".join(answer.describe() for answer in answers)
        unavailable = Check(unavailable.name, unavailable.ok, f"{len(answers)} tries: {tries}")
    others = set(system.shards_off(system.shard_server))
    running: set[int] = set()

    def others_ran() -> bool:
        running.update(observers.shards.shards_running_since(injected_at))
        return others <= running

    # Until shortly before the heal: a shard's jobs due since the fill take a moment to run.
    poll_until(others_ran, timeout=max(0.0, injected_at + DISK_FULL_SECONDS - 1 - time.time()))
    went_on = Check(
        f"the shards on other servers ({_listed(others)}) ran jobs while the disk was full",
        others <= running,
        f"shards that ran jobs due since the fill: {_listed(running) or 'none'}",
    )
    return [unavailable, went_on]


def _free(system: System) -> str:
    assert system.small_disk is not None
    system.small_disk.free()
    server = system.shard_server
    if server.is_running() and poll_until(lambda: _answers(server), timeout=RECOVERY_SECONDS):
        return "freed"
    how = server.process.describe_exit() if server.process is not None else "is gone"
    logger.warning("%s %s while its disk was full: starting it again", server.name, how)
    server.stop()
    server.start()
    return (
        f"freed; {server.name} {how} while its disk was full: started again, as an operator would"
    )


def _answers(server) -> bool:
    try:
        with server.connect():
            return True
    except psycopg.OperationalError:
        return False


def _listed(shards: set[int]) -> str:
    return ", ".join(str(shard) for shard in sorted(shards))
