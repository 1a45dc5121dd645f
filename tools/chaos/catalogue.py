"""Every fault the campaign knows, in the order of its single pass.

Processes killed and paused, database sessions cut, servers restarted (faults), links cut
(partitions), clocks off (clock_skew), a disk full (full_disk); the failover comes apart,
last, with standbys. Faults this machine cannot make (partitions and the full disk need
root, clock skew gcc) are left out, and `unavailable` says why.
"""

from __future__ import annotations

from . import clock_skew
from .clock_skew import skew_faults
from .faults import (
    Fault,
    cut_db_sessions,
    kill,
    pause,
    restart_broker,
    server_down,
)
from .full_disk import full_disk
from .partitions import partition_faults
from .system import System


def faults_for(system: System, *, scheduler: str, executor: str) -> list[Fault]:
    """Every fault the stack supports here (not the failover), in campaign order."""
    assert system.stack is not None
    control, shards = system.stack.postgres[0], system.shard_server
    faults = [
        kill(scheduler),
        kill(executor),
        kill("api"),
        pause(scheduler),
        pause(executor),
        pause("api"),
        cut_db_sessions(frozenset(server.name for server in system.stack.postgres)),
        server_down(
            "restart shard db",
            "fast shutdown and start of the server holding shards 2-3",
            lambda s: s.shard_server,
            shards.name,
        ),
        server_down(
            "restart control db",
            "fast shutdown and start of the server holding the control database and shards 0-1",
            lambda s: s.stack.postgres[0],
            control.name,
        ),
        server_down(
            "restart zookeeper",
            "ZooKeeper stopped and started",
            lambda s: s.stack.zookeeper,
            system.stack.zookeeper.name,
        ),
        restart_broker(),
    ]
    if system.unavailable["partition"] is None:
        faults += partition_faults(system, scheduler=scheduler, executor=executor)
    if clock_skew.available() is None:
        faults += skew_faults(scheduler=scheduler, executor=executor)
    if system.unavailable["full disk"] is None:
        faults.append(full_disk(shards.name))
    return faults


def unavailable(system: System) -> dict[str, str]:
    """The kinds of fault left out on this machine, and why."""
    why = {kind: reason for kind, reason in system.unavailable.items() if reason}
    if (reason := clock_skew.available()) is not None:
        why["clock skew"] = reason
    return why
