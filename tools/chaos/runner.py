"""The campaign: start the system and the client, run the nemesis's schedule, drain, check.

Schedule: one pass of every fault (victims: the first scheduler and executor), then
`mixed` faults drawn at random (fault and victim) from a seeded generator, then, with
standbys, the failover (last, since afterwards the shard server has no standby left).
After each heal the runner waits until every shard runs jobs again (at most
`RECOVERY_TIMEOUT`), then lets the system run undisturbed for `SETTLE_SECONDS`.
"""

from __future__ import annotations

import logging
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from tools.webhook_receiver import Delivery, Receiver

from .checker import classify, recovery
from .faults import Fault, FaultEvent, failover, faults_for, run_fault
from .history import JobRow, ShardProbe, job_rows
from .system import System
from .workload import Workload

logger = logging.getLogger(__name__)

RECOVERY_TIMEOUT = 30.0  # seconds after a heal to wait for every shard to run jobs again
SETTLE_SECONDS = 1.0  # undisturbed running between faults
DRAIN_TIMEOUT = 90.0  # seconds after the client stops for every job to finish
POLL_SECONDS = 0.25
TERMINAL = {"succeeded", "failed", "cancelled"}


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


def plan(system: System, options: Options, rng: random.Random) -> list[Fault]:
    schedulers, executors = system.app_names("scheduler"), system.app_names("executor")
    faults = faults_for(system, scheduler=schedulers[0], executor=executors[0])
    for _ in range(options.mixed):
        drawn = faults_for(system, scheduler=rng.choice(schedulers), executor=rng.choice(executors))
        faults.append(rng.choice(drawn))
    if options.replicas:
        faults.append(failover(system))
    if options.only:
        faults = [f for f in faults if f.name.startswith(options.only)]
    return faults


def run_campaign(options: Options) -> dict:
    rng = random.Random(options.seed)
    started = time.time()
    system = System(replicas=options.replicas, timings=dict(options.timings))
    receiver = Receiver().start()
    workload: Workload | None = None
    probe = ShardProbe(system)
    try:
        system.start()
        workload = Workload(
            api_url=system.api_url,
            receiver_url=receiver.url,
            rate=options.rate,
            seed=options.seed,
            burst=options.burst,
        ).start()
        shards = len(system.shard_urls())
        _wait_running(probe, shards, since=time.time(), workload=workload)
        events: list[FaultEvent] = []
        for fault in plan(system, options, rng):
            events.append(run_fault(fault, system))
            _wait_running(probe, shards, since=events[-1].healed_at, workload=workload)
            time.sleep(SETTLE_SECONDS)  # the schedule: undisturbed running between faults
        workload.stop()
        rows = _drain(system, workload)
        result = _result(events, workload, rows, receiver.deliveries(), shards=shards)
        return {"seed": options.seed, "replicas": options.replicas, "rate": options.rate,
                "seconds": round(time.time() - started, 1), **result}  # fmt: skip
    finally:
        if workload is not None:
            workload.stop()
        probe.close()
        system.stop()
        receiver.stop()
        _keep_logs(system, options)


def _result(
    events: list[FaultEvent],
    workload: Workload,
    rows: dict[str, JobRow],
    deliveries: list[Delivery],
    *,
    shards: int,
) -> dict:
    """Every job classified, in total and per fault, with each fault's recovery."""
    total, before, per_fault = classify(workload.created, rows, deliveries, events)
    faults = []
    for index, event in enumerate(events):
        next_injected_at = events[index + 1].injected_at if index + 1 < len(events) else None
        faults.append(
            {
                "fault": event.fault,
                "detail": event.detail,
                "injected_at": event.injected_at,
                "held_s": round(event.healed_at - event.injected_at, 2),
                **recovery(event, next_injected_at, workload.created, rows, workload.acks, shards),
                "check": per_fault[index].as_dict(),
            }
        )
    return {
        "indeterminate_creates": workload.indeterminate,
        "deliveries": len(deliveries),
        "total": total.as_dict(),
        "faults": faults,
        "before_faults": before.as_dict(),
    }


def _wait_running(
    probe: ShardProbe, shards: int, *, since: float, workload: Workload
) -> float | None:
    """Seconds until every shard started a job due after `since`; None after the timeout."""
    deadline = since + RECOVERY_TIMEOUT
    while time.time() < deadline:
        if workload.error is not None:
            raise RuntimeError(f"the client stopped: {workload.error}") from workload.error
        if len(probe.shards_running_since(since)) == shards:
            return time.time() - since
        time.sleep(POLL_SECONDS)  # polling the shards, bounded by the deadline
    logger.warning("not every shard ran new jobs within %.0fs", RECOVERY_TIMEOUT)
    return None


def _drain(system: System, workload: Workload) -> dict:
    """The job rows, once every acknowledged job is finished (or after `DRAIN_TIMEOUT`)."""
    ids = [job.job_id for job in workload.created]
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
