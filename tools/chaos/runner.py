"""The campaign: start the system and the client, run the nemesis's schedule, drain, check.

Schedule: one pass of every fault (victims: the first scheduler and executor), then
`mixed` steps drawn at random from a seeded generator, each a fault (and its victim) or,
one time in `PAIR_ODDS`, two faults at once (acting on different processes and servers,
and not two workers of one kind, which would leave none to take their work over), then,
with standbys, the failover (last, since afterwards the shard server has no standby
left). After each heal the runner waits until the system has caught up (at most
`RECOVERY_TIMEOUT`): every shard runs jobs again, and none holds a job due over a second
ago and not started, or one whose executor's lease ran out. Then it lets the system run
undisturbed for `SETTLE_SECONDS`. So a fault starts from a system on time, and a job
late from one fault is not counted under the next (two faults at once are a step of
their own).
"""

from __future__ import annotations

import logging
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from tools.webhook_receiver import Delivery, Receiver

from .catalogue import faults_for, unavailable
from .checker import BOUND_SECONDS, classify, recovery
from .faults import Fault, FaultEvent, failover, run_faults
from .history import JobRow, ShardProbe, job_rows, prepared_transactions, user_jobs
from .probes import BulkProbe, Observers, unacknowledged
from .system import System
from .workload import Workload

logger = logging.getLogger(__name__)

RECOVERY_TIMEOUT = 30.0  # seconds after a heal to wait for the system to catch up
SETTLE_SECONDS = 1.0  # undisturbed running between faults
DRAIN_TIMEOUT = 90.0  # seconds after the client stops for every job to finish
POLL_SECONDS = 0.25
TERMINAL = {"succeeded", "failed", "cancelled"}
PAIR_ODDS = 3  # one mixed step in this many is two faults at once


@dataclass(frozen=True)
class Options:
    seed: int
    replicas: int
    mixed: int  # faults drawn at random after the single pass
    rate: float  # creates per second
    out: Path
    keep: bool = False  # keep the stack's directory (data and logs)
    timings: tuple[tuple[str, str], ...] = ()  # settings over the fast timings
    only: tuple[str, ...] = ()  # fault names (prefixes) to keep; empty: all (development runs)
    burst: int = 0  # jobs per bulk request of a fourth user every few seconds (workload)
    bound: float = BOUND_SECONDS  # seconds a job due during a fault may start late


@dataclass(frozen=True)
class Step:
    """One or two faults run at once, and the phase of the schedule they belong to."""

    faults: tuple[Fault, ...]
    phase: str  # "single", "mixed" or "failover"


def plan(system: System, options: Options, rng: random.Random) -> list[Step]:
    schedulers, executors = system.app_names("scheduler"), system.app_names("executor")
    steps = [
        Step((fault,), "single")
        for fault in faults_for(system, scheduler=schedulers[0], executor=executors[0])
    ]
    for _ in range(options.mixed):

        def draw() -> list[Fault]:
            scheduler, executor = rng.choice(schedulers), rng.choice(executors)
            return faults_for(system, scheduler=scheduler, executor=executor)

        first = rng.choice(draw())
        partners = [fault for fault in draw() if _may_pair(first, fault)]
        if rng.randrange(PAIR_ODDS) == 0 and partners:
            steps.append(Step((first, rng.choice(partners)), "mixed"))
        else:
            steps.append(Step((first,), "mixed"))
    if options.replicas:
        steps.append(Step((failover(system.shard_server.name),), "failover"))
    if options.only:
        steps = [s for s in steps if any(f.name.startswith(options.only) for f in s.faults)]
    return steps


def _may_pair(first: Fault, second: Fault) -> bool:
    """Two faults on different processes and servers, not both on workers of one kind."""
    if first.targets & second.targets:
        return False
    kinds = {target.split("-")[0] for target in first.targets | second.targets}
    return not (first.takeover and second.takeover and len(kinds) == 1)


def run_campaign(options: Options) -> dict:
    rng = random.Random(options.seed)
    started = time.time()
    system = System(replicas=options.replicas, timings=dict(options.timings))
    receiver = Receiver().start()
    workload: Workload | None = None
    probe = ShardProbe(system)
    try:
        system.start()
        for kind, reason in unavailable(system).items():
            logger.warning("left out: %s (%s)", kind, reason)
        workload = Workload(
            api_url=system.api_url,
            receiver_url=receiver.url,
            rate=options.rate,
            seed=options.seed,
            burst=options.burst,
        ).start()
        observers = Observers(probe=BulkProbe(api_url=system.api_url).start(), shards=probe)
        shards = len(system.shard_urls())
        _wait_caught_up(probe, shards, since=time.time(), workload=workload)
        events: list[FaultEvent] = []
        steps = plan(system, options, rng)
        for step in steps:
            events.append(run_faults(step.faults, system, observers))
            _wait_caught_up(probe, shards, since=events[-1].healed_at, workload=workload)
            time.sleep(SETTLE_SECONDS)  # the schedule: undisturbed running between faults
        workload.stop()
        created = workload.created + observers.probe.created
        rows = _drain(system, created)
        result = _result(
            events,
            [step.phase for step in steps],
            workload,
            created,
            rows,
            receiver.deliveries(),
            shards=shards,
            bound=options.bound,
        )
        result["checks"] = _final_checks(system, observers.probe, result["faults"])
        return {"seed": options.seed, "replicas": options.replicas, "rate": options.rate,
                "seconds": round(time.time() - started, 1), "bound_s": options.bound,
                "left_out": unavailable(system), **result}  # fmt: skip
    finally:
        if workload is not None:
            workload.stop()
        probe.close()
        system.stop()
        receiver.stop()
        _keep_logs(system, options)


def _result(
    events: list[FaultEvent],
    phases: list[str],
    workload: Workload,
    created: list,
    rows: dict[str, JobRow],
    deliveries: list[Delivery],
    *,
    shards: int,
    bound: float,
) -> dict:
    """Every job classified, in total and per fault, with each fault's recovery."""
    total, before, per_fault = classify(created, rows, deliveries, events, bound=bound)
    faults = []
    for index, event in enumerate(events):
        next_injected_at = events[index + 1].injected_at if index + 1 < len(events) else None
        faults.append(
            {
                "fault": event.fault,
                "phase": phases[index],
                "detail": event.detail,
                "injected_at": event.injected_at,
                "held_s": round(event.healed_at - event.injected_at, 2),
                "bound_from": _bound_from(event),
                **recovery(event, next_injected_at, created, rows, workload.acks, shards),
                "check": per_fault[index].as_dict(),
                "checks": [check.as_dict() for check in event.checks],
            }
        )
    return {
        "indeterminate_creates": workload.indeterminate,
        "deliveries": len(deliveries),
        "total": total.as_dict(),
        "faults": faults,
        "before_faults": before.as_dict(),
    }


def _wait_caught_up(
    probe: ShardProbe, shards: int, *, since: float, workload: Workload
) -> float | None:
    """Seconds until every shard started a job due after `since` and none is behind
    (`ShardProbe.shards_behind`); None after the timeout."""
    deadline = since + RECOVERY_TIMEOUT
    while time.time() < deadline:
        if workload.error is not None:
            raise RuntimeError(f"the client stopped: {workload.error}") from workload.error
        if len(probe.shards_running_since(since)) == shards and not probe.shards_behind():
            return time.time() - since
        time.sleep(POLL_SECONDS)  # polling the shards, bounded by the deadline
    logger.warning("the system did not catch up within %.0fs of the heal", RECOVERY_TIMEOUT)
    return None


def _bound_from(event: FaultEvent) -> str:
    """When the bound starts for the fault's jobs: their due time, or the heal."""
    return "due" if all(part.takeover for part in event.parts or (event,)) else "heal"


def _final_checks(system: System, probe: BulkProbe, faults: list[dict]) -> list[dict]:
    """After the drain: the jobs of the probe's unacknowledged creates (each request's go to
    the fault it was sent in, as a check), and any prepared transaction left."""
    assert probe.user_id is not None
    created = unacknowledged(user_jobs(system, probe.user_id), probe)
    for answer in probe.answers:
        fault = next(f for f in reversed(faults) if f["injected_at"] <= answer.sent_at)
        count = created.get(answer.number, 0)
        fault["checks"].append(
            {"name": f"bulk create {answer.number} made only what it acknowledged",
             "ok": count == 0,
             "detail": f"{answer.jobs} acknowledged, {count} more exist"}
        )  # fmt: skip
    left = prepared_transactions(system)
    return [
        {
            "name": "no prepared transaction left after the drain",
            "ok": not any(left.values()),
            "detail": ", ".join(f"{server}: {count}" for server, count in left.items()),
        }
    ]


def _drain(system: System, created: list) -> dict:
    """The job rows, once every acknowledged job is finished (or after `DRAIN_TIMEOUT`)."""
    ids = [job.job_id for job in created]
    deadline = time.time() + DRAIN_TIMEOUT
    while True:
        rows = job_rows(system)
        unfinished = [i for i in ids if i not in rows or rows[i].status not in TERMINAL]
        if not unfinished or time.time() > deadline:
            if unfinished:
                logger.warning(
                    "%d jobs unfinished %.0fs after the client stopped",
                    len(unfinished),
                    DRAIN_TIMEOUT,
                )
            return rows
        time.sleep(1.0)  # polling the shards, bounded by the deadline


def _keep_logs(system: System, options: Options) -> None:
    """The processes' logs go to `out/logs` (evidence for a failed check); the stack's
    data is deleted unless `keep`."""
    target = options.out / "logs"
    shutil.rmtree(target, ignore_errors=True)
    if system.logs_dir.exists():
        shutil.copytree(system.logs_dir, target)
    if not options.keep:
        shutil.rmtree(system.root, ignore_errors=True)
