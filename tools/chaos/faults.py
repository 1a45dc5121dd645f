"""The nemesis: each fault is injected, held for a while, then healed.

`hold` is the fault's length (how long a process stays paused, a server down, a link
cut), part of the campaign's schedule, not a wait for anything. A killed app is started
again at the heal, as `make run`'s process manager does (after 1 s). Heal times are what
recovery is measured from; for a failover it is the moment the promoted standby accepts
writes.

Each fault says what it disturbs (`targets`: app and server names, with those its check
asks), so that two faults run at once (`run_faults`) never act on the same process or
server, nor one on what the other's check asks, and how its bound
counts (`takeover`): a fault of one worker (killed, paused, cut off, its clock off)
leaves others able to do its work, so every job due during it must start within the
bound of its due time; any other fault may hold jobs until it ends, so the bound counts
from the later of the due time and the heal. A fault may also check something while it
holds (`during`, `during_after` seconds after the injection): what a client is answered.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tools.fast_timings import ZK_SESSION_SECONDS

from .system import System

if TYPE_CHECKING:
    from .probes import Observers

logger = logging.getLogger(__name__)

RESTART_DELAY = 1.0  # seconds a killed app or a stopped server stays down
PAUSE_SECONDS = ZK_SESSION_SECONDS + 2.0  # SIGSTOP past the ZooKeeper session


@dataclass(frozen=True)
class Check:
    """Something a fault asserts besides the jobs' fates (a client's answer, say)."""

    name: str
    ok: bool
    detail: str

    def as_dict(self) -> dict:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class Fault:
    name: str
    what: str  # for the report
    inject: Callable[[System], object]  # returns a detail for the report, or None
    heal: Callable[[System], object]  # likewise
    hold: float  # seconds between inject and heal
    targets: frozenset[str] = frozenset()  # apps and servers it acts on, or its check asks
    takeover: bool = False  # one worker's fault: the bound counts from the due time
    # (system, observers, injected_at): what the fault checks while it holds
    during: Callable[[System, Observers, float], list[Check]] | None = None
    during_after: float = 0.0  # seconds after the injection


@dataclass(frozen=True)
class FaultEvent:
    """A fault as it happened; a compound's `parts` are its faults, each with its heal."""

    fault: str
    detail: str
    injected_at: float  # Unix seconds
    healed_at: float
    takeover: bool = False
    parts: tuple[FaultEvent, ...] = ()
    checks: tuple[Check, ...] = field(default=())

    def bound_from(self, due: float) -> float:
        """When the bound starts for a job due at `due` (the later of its due time and the
        heal, or its due time alone for one worker's fault); a compound's latest part."""
        return max(
            due if part.takeover else max(due, part.healed_at) for part in self.parts or (self,)
        )


def run_fault(fault: Fault, system: System, observers: Observers | None = None) -> FaultEvent:
    return run_faults([fault], system, observers)


def run_faults(
    faults: Sequence[Fault], system: System, observers: Observers | None = None
) -> FaultEvent:
    """Inject `faults` together, run each one's check during its hold, heal each after its
    own hold; one fault's event, or a compound's with each fault as a part.

    The checks run one after the other on a thread of their own: a check may take most of
    its fault's hold (the full disk's waits for the other shards to run jobs), and must
    not hold up another fault's heal meanwhile."""
    injected: list[tuple[Fault, float, str]] = []
    for fault in faults:
        logger.info("nemesis: %s (%s)", fault.name, fault.what)
        at = time.time()
        injected.append((fault, at, _text(fault.inject(system))))
    checks: dict[int, list[Check]] = {index: [] for index in range(len(injected))}
    failures: list[BaseException] = []  # a check that raised: raised again after the heals

    def run_checks() -> None:
        try:
            _run_checks(injected, system, observers, checks)
        except BaseException as exc:
            failures.append(exc)

    checking = threading.Thread(target=run_checks, name="fault-checks")
    checking.start()
    healed: dict[int, tuple[float, str]] = {}
    heals = sorted((at + fault.hold, index) for index, (fault, at, _) in enumerate(injected))
    for when, index in heals:
        time.sleep(max(0.0, when - time.time()))  # the schedule, not synchronisation
        fault = injected[index][0]
        detail = _text(fault.heal(system))
        healed[index] = (time.time(), detail)
        logger.info(
            "nemesis: %s healed after %.1fs", fault.name, healed[index][0] - injected[index][1]
        )
    checking.join()
    if failures:
        raise failures[0]
    parts = tuple(
        FaultEvent(
            fault=fault.name,
            detail="; ".join(filter(None, (detail, healed[index][1]))),
            injected_at=at,
            healed_at=healed[index][0],
            takeover=fault.takeover,
            checks=tuple(checks[index]),
        )
        for index, (fault, at, detail) in enumerate(injected)
    )
    if len(parts) == 1:
        return parts[0]
    return FaultEvent(
        fault=" + ".join(part.fault for part in parts),
        detail="; ".join(f"{part.fault}: {part.detail}" for part in parts if part.detail),
        injected_at=min(part.injected_at for part in parts),
        healed_at=max(part.healed_at for part in parts),
        parts=parts,
        checks=tuple(check for part in parts for check in part.checks),
    )


def _run_checks(
    injected: list[tuple[Fault, float, str]],
    system: System,
    observers: Observers | None,
    checks: dict[int, list[Check]],
) -> None:
    """Each fault's check, at its time after the fault's injection, one at a time."""
    steps = sorted(
        (at + fault.during_after, index)
        for index, (fault, at, _) in enumerate(injected)
        if fault.during is not None
    )
    for when, index in steps:
        time.sleep(max(0.0, when - time.time()))  # the schedule, not synchronisation
        fault, at, _ = injected[index]
        assert fault.during is not None and observers is not None
        checks[index] += fault.during(system, observers, at)


def _text(detail: object) -> str:
    return "" if detail is None else str(detail)


def kill(app: str) -> Fault:
    return Fault(
        name=f"kill {app}",
        what=f"SIGKILL {app}'s process group, started again after {RESTART_DELAY:g} s",
        inject=lambda s: s.signal_app(app, signal.SIGKILL),
        heal=lambda s: s.start_app(app),  # healed: started (the API's boot shows as recovery)
        hold=RESTART_DELAY,
        targets=frozenset({app}),
        takeover=app != "api",
    )


def pause(app: str) -> Fault:
    return Fault(
        name=f"pause {app}",
        what=f"SIGSTOP {app}'s process group for {PAUSE_SECONDS:g} s, then SIGCONT",
        inject=lambda s: s.signal_app(app, signal.SIGSTOP),
        heal=lambda s: s.signal_app(app, signal.SIGCONT),
        hold=PAUSE_SECONDS,
        targets=frozenset({app}),
        takeover=app != "api",
    )


def server_down(name: str, what: str, server: Callable[[System], object], target: str) -> Fault:
    return Fault(
        name=name,
        what=what,
        inject=lambda s: server(s).stop(),
        heal=lambda s: server(s).start(),
        hold=RESTART_DELAY,
        targets=frozenset({target}),
    )


def cut_db_sessions(servers: frozenset[str]) -> Fault:
    return Fault(
        name="cut db sessions",
        what="pg_terminate_backend on every client session of every PostgreSQL server",
        inject=lambda s: f"{s.cut_every_session()} sessions",
        heal=lambda s: None,
        hold=0.0,
        targets=servers,
    )


def restart_broker() -> Fault:
    return Fault(
        name="restart broker",
        what="Kafka SIGKILLed and started again (it keeps every message)",
        inject=_kill_broker,
        heal=_start_broker,
        hold=RESTART_DELAY,
        targets=frozenset({"kafka"}),
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


def failover(server: str) -> Fault:
    """SIGKILL the shard server's primary; its standby is promoted after `RESTART_DELAY`."""
    return Fault(
        name="failover shard db",
        what="SIGKILL the primary of shards 2-3, promote its synchronous standby",
        inject=_kill_primary,
        heal=_promote,
        hold=RESTART_DELAY,
        targets=frozenset({server}),
    )
