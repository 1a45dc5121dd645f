"""Partition faults: one app cut off from one server for `PARTITION_SECONDS`, packets
dropped both ways (`firewall`), its connections left half-open.

- an executor cut off from the PostgreSQL server of shards 2-3, and a scheduler from the
  server of shards it owns: the jobs of those shards must be taken over;
- a scheduler cut off from ZooKeeper for longer than its session: its shards must move;
- an executor and a scheduler cut off from the broker;
- the API cut off from the server of shards 2-3: a bulk create touching those shards must
  answer 503 within `PROBE_TIMEOUT` and create nothing (a check run during the cut);
- every app cut off from that server at once (its host vanished): its shards' jobs wait
  for the heal, but the other shards' jobs must start within the bound of their due time
  (a check run during the cut).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

from coordination.cluster import cluster_membership
from coordination.errors import CoordinationError
from tools.devstack.server import Server
from tools.fast_timings import ZK_SESSION_SECONDS

from .checker import BOUND_SECONDS
from .faults import Check, Fault
from .history import latest_start
from .probes import Observers, answered_unavailable
from .system import System

logger = logging.getLogger(__name__)

# Longer than every detection the product could use to take the work over (the ZooKeeper
# session, 4 s here; the Kafka consumer session; TCP keepalives), and longer than the
# bound, so that work which merely waits for the heal shows as late.
PARTITION_SECONDS = 15.0
PROBE_AFTER = 2.0  # seconds into the API's cut before its bulk create
ZK_ROOT = "/jobsvc"  # the workers' JOBSVC_ZK_ROOT (not set by the campaign)
OWNERS_TIMEOUT = 3.0  # seconds to read the shard owners from ZooKeeper


def cut(
    app: str,
    label: str,
    server: Callable[[System], Server],
    *,
    takeover: bool = True,
    during: Callable[[System, Observers, float], list[Check]] | None = None,
) -> Fault:
    """`app` cut off from `server(system)` (named `label` in the report)."""

    def inject(system: System) -> str:
        target = server(system)
        system.cut(app, target)
        return f"cut from {target.name} ({target.address})"

    def heal(system: System) -> None:
        system.heal_cut(app, server(system))

    return Fault(
        name=f"cut {app} from {label}",
        what=f"every packet between {app} and the {label} dropped for {PARTITION_SECONDS:g} s",
        inject=inject,
        heal=heal,
        hold=PARTITION_SECONDS,
        targets=frozenset({app}),
        takeover=takeover,
        during=during,
        during_after=PROBE_AFTER,
    )


def cut_from_owned_shards(scheduler: str) -> Fault:
    """The scheduler cut off from the PostgreSQL server of a shard it owns, the shard
    server's if it owns one there (chosen at the injection, from ZooKeeper; the shard
    server if it owns none, or if ZooKeeper cannot say)."""
    chosen: list[Server] = []

    def inject(system: System) -> str:
        server, owned = _server_of_owned_shard(system, scheduler)
        chosen.append(server)
        system.cut(scheduler, server)
        return f"cut from {server.name} ({server.address}); it owned shards {owned or 'none'}"

    def heal(system: System) -> None:
        system.heal_cut(scheduler, chosen.pop())

    return dataclasses.replace(
        cut(scheduler, "its shard db", lambda s: s.shard_server), inject=inject, heal=heal
    )


def _server_of_owned_shard(system: System, scheduler: str) -> tuple[Server, list[int]]:
    """The server of a shard the scheduler owns (its ZooKeeper member node names its pid),
    and the shards it owns."""
    assert system.stack is not None
    try:
        cluster = cluster_membership(
            hosts=system.stack.zookeeper.hosts,
            root=ZK_ROOT,
            shard_ids=range(system.stack.shards),
            timeout=OWNERS_TIMEOUT,
        )
    except CoordinationError as exc:
        logger.warning("could not read the shard owners (%s): cutting from the shard server", exc)
        return system.shard_server, []
    pid = system.apps[scheduler].pid
    ids = {member.worker_id for member in cluster.members if member.pid == pid}
    owned = sorted(shard for shard, owner in cluster.shard_owners.items() if owner in ids)
    for server in reversed(system.stack.postgres):  # the shard server first
        if set(owned) & set(system.shards_on(server)):
            return server, owned
    return system.shard_server, owned


def _bulk_create_unavailable(system: System, observers: Observers, _: float) -> list[Check]:
    answer = observers.probe.bulk_create()
    return [answered_unavailable(answer, what="bulk create over every shard")]


def cut_everyone_from_shard_server() -> Fault:
    """Every app cut off from the shard server at once, as when its host vanishes."""

    def inject(system: System) -> str:
        system.cut_every_app(system.shard_server)
        return f"every app cut from {system.shard_server.name}"

    return Fault(
        name="cut everyone from shard db",
        what=f"every packet between every app and server B dropped for {PARTITION_SECONDS:g} s",
        inject=inject,
        heal=lambda system: system.heal_every_app(system.shard_server),
        hold=PARTITION_SECONDS,
        targets=frozenset(),
        takeover=False,
        during=_other_shards_on_time,
        during_after=0.0,
    )


def _other_shards_on_time(system: System, observers: Observers, injected_at: float) -> list[Check]:
    """The jobs of the shards on the other servers, due while the cut holds, started within
    the bound of their due times (looked at just before the heal)."""
    time.sleep(max(0.0, injected_at + PARTITION_SECONDS - 1.0 - time.time()))
    others = system.shards_off(system.shard_server)
    latest, jobs = latest_start(system, others, injected_at, time.time() - 1.0)
    return [
        Check(
            f"the shards on other servers ({', '.join(map(str, others))}) started their jobs "
            f"within {BOUND_SECONDS:g} s of their due times",
            jobs > 0 and latest <= BOUND_SECONDS,
            f"{jobs} jobs due, the latest started {latest:.1f} s after its due time",
        )
    ]


def partition_faults(system: System, *, scheduler: str, executor: str) -> list[Fault]:
    """Every partition fault, in campaign order."""
    return [
        cut(executor, "shard db", lambda s: s.shard_server),
        cut_from_owned_shards(scheduler),
        cut(scheduler, "zookeeper", lambda s: s.stack.zookeeper),
        cut(executor, "broker", lambda s: s.stack.kafka),
        cut(scheduler, "broker", lambda s: s.stack.kafka),
        cut("api", "shard db", lambda s: s.shard_server, takeover=False,
            during=_bulk_create_unavailable),
        cut_everyone_from_shard_server(),
    ]  # fmt: skip


assert PARTITION_SECONDS > ZK_SESSION_SECONDS  # "longer than its session"
