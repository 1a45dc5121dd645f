"""The nemesis: each fault is injected, held for a while, then healed.

`hold` is the fault's length (how long a process stays paused, a server down), part of
the campaign's schedule, not a wait for anything. A killed app is started again at the
heal, as `make run`'s process manager does (after 1 s). Heal times are what recovery is
measured from; for a failover it is the moment the promoted standby accepts writes.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from tools.fast_timings import ZK_SESSION_SECONDS

from .system import System

logger = logging.getLogger(__name__)

RESTART_DELAY = 1.0  # seconds a killed app or a stopped server stays down
PAUSE_SECONDS = ZK_SESSION_SECONDS + 2.0  # SIGSTOP past the ZooKeeper session


@dataclass(frozen=True)
class Fault:
    name: str
    what: str  # for the report
    inject: Callable[[System], object]
    heal: Callable[[System], object]
    hold: float  # seconds between inject and heal


@dataclass(frozen=True)
class FaultEvent:
    fault: str
    detail: str
    injected_at: float  # Unix seconds
    healed_at: float


def run_fault(fault: Fault, system: System) -> FaultEvent:
    logger.info("nemesis: %s (%s)", fault.name, fault.what)
    injected_at = time.time()
    detail = fault.inject(system)
    time.sleep(fault.hold)  # the fault's length: the schedule, not synchronisation
    fault.heal(system)
    healed_at = time.time()
    logger.info("nemesis: %s healed after %.1fs", fault.name, healed_at - injected_at)
    return FaultEvent(fault.name, str(detail or ""), injected_at, healed_at)


def _kill(app: str) -> Fault:
    return Fault(
        name=f"kill {app}",
        what=f"SIGKILL {app}'s process group, started again after {RESTART_DELAY:g} s",
        inject=lambda s: s.signal_app(app, signal.SIGKILL),
        heal=lambda s: s.start_app(app),  # healed: started (the API's boot shows as recovery)
        hold=RESTART_DELAY,
    )


def _pause(app: str) -> Fault:
    return Fault(
        name=f"pause {app}",
        what=f"SIGSTOP {app}'s process group for {PAUSE_SECONDS:g} s, then SIGCONT",
        inject=lambda s: s.signal_app(app, signal.SIGSTOP),
        heal=lambda s: s.signal_app(app, signal.SIGCONT),
        hold=PAUSE_SECONDS,
    )


def _server_down(name: str, what: str, server: Callable[[System], object]) -> Fault:
    return Fault(
        name=name,
        what=what,
        inject=lambda s: server(s).stop(),
        heal=lambda s: server(s).start(),
        hold=RESTART_DELAY,
    )


def _kill_broker(system: System) -> None:
    # SIGKILL, not a clean stop: what it acknowledged must survive a crash (the log is in
    # the page cache; Kafka recovers its segments at start-up).
    broker = system.stack.kafka
    broker.process.kill_group()
    broker.stop()  # reaps the exited process


def _start_broker(system: System) -> None:
    system.stack.kafka.start()


def _kill_primary(system: System) -> str:
    primary = system.stack.postgres[-1]
    primary.process.kill_group()  # the postmaster and every backend, at once
    primary.process.wait(10)
    return f"{primary.name} killed"


def _promote(system: System) -> None:
    system.stack.standbys_of(system.stack.postgres[-1])[0].promote()


def faults_for(system: System, *, scheduler: str, executor: str) -> list[Fault]:
    """Every fault the stack supports (failover only with standbys), in campaign order."""
    faults = [
        _kill(scheduler),
        _kill(executor),
        _kill("api"),
        _pause(scheduler),
        _pause(executor),
        _pause("api"),
        Fault(
            name="cut db sessions",
            what="pg_terminate_backend on every client session of every PostgreSQL server",
            inject=lambda s: f"{s.cut_every_session()} sessions",
            heal=lambda s: None,
            hold=0.0,
        ),
        _server_down(
            "restart shard db",
            "fast shutdown and start of the server holding shards 2-3",
            lambda s: s.stack.postgres[-1],
        ),
        _server_down(
            "restart control db",
            "fast shutdown and start of the server holding the control database and shards 0-1",
            lambda s: s.stack.postgres[0],
        ),
        _server_down(
            "restart zookeeper", "ZooKeeper stopped and started", lambda s: s.stack.zookeeper
        ),
        Fault(
            name="restart broker",
            what="Kafka SIGKILLed and started again (it keeps every message)",
            inject=_kill_broker,
            heal=_start_broker,
            hold=RESTART_DELAY,
        ),
    ]
    return faults


def failover(system: System) -> Fault:
    """SIGKILL the shard server's primary; its standby is promoted after `RESTART_DELAY`."""
    return Fault(
        name="failover shard db",
        what="SIGKILL the primary of shards 2-3, promote its synchronous standby",
        inject=_kill_primary,
        heal=_promote,
        hold=RESTART_DELAY,
    )
