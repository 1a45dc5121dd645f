"""Classify every acknowledged job, and measure each fault's recovery, from the history.

- lost: not `succeeded` at the end (or missing), or an `http` job succeeded that the
  receiver never got;
- duplicate: one (job, attempt) delivered more than once (`http` jobs, at the receiver);
- re-run: a job delivered in more than one attempt (allowed: at least once per job);
- early: started (by its row or by a delivery) before `execute_at`;
- late: started more than `LATE_SECONDS` after it was due (or acknowledged, if later).

Every time is the true clock's: deliveries are stamped by the receiver (this process), a
row's `started_at` by its database (`now()`), `execute_at` by the client; a worker whose
clock is skewed cannot move them.

A job belongs to the last fault injected before it should have started (`execute_at` +
`ON_TIME_SECONDS`): a job due a moment before a fault is that fault's too. Its lateness
is its first start (first delivery, or its row's start, that of its last attempt) less
the moment the bound starts: the later of its due time and the fault's heal, or its due
time alone under one worker's fault, which others must take over
(`FaultEvent.bound_from`). A fault whose latest job is more than the bound (`BOUND_SECONDS`)
late fails the campaign. Recovery of a
fault, from its heal: *running again* when every shard has started a job due after the
heal; *on time again* when the last job of the window that started more than
`ON_TIME_SECONDS` late had started; *API* when the first create after the heal was
acknowledged.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from tools.webhook_receiver import Delivery

from .faults import FaultEvent
from .history import JobRow
from .workload import Created

BOUND_SECONDS = 10.0  # a job due during a fault starts within this of the bound's start
LATE_SECONDS = 30.0  # started this long after due counts as late (reported, not failed)
ON_TIME_SECONDS = 1.0  # a start this close to due is on time
CLOCK_SLACK = 0.005  # seconds: the rows' timestamps and this process's clock are one clock,
# but execute_at goes through the API's ISO text (microseconds): no slack for early beyond it


@dataclass
class Tally:
    jobs: int = 0
    lost: list[str] = field(default_factory=list)
    duplicate: list[str] = field(default_factory=list)
    rerun: int = 0
    early: list[str] = field(default_factory=list)
    late: int = 0
    max_late: float | None = None  # seconds from the bound's start to the latest first start
    latest: str = ""  # that job
    over_bound: int = 0  # jobs that started more than the bound late

    def as_dict(self) -> dict:
        return {
            "jobs": self.jobs,
            "lost": len(self.lost),
            "duplicate": len(self.duplicate),
            "rerun": self.rerun,
            "early": len(self.early),
            "late": self.late,
            "max_late_s": None if self.max_late is None else round(self.max_late, 2),
            "over_bound": self.over_bound,
            "examples": {
                "lost": self.lost[:5],
                "duplicate": self.duplicate[:5],
                "early": self.early[:5],
                "latest": self.latest,
            },
        }


def window_of(events: list[FaultEvent], execute_at: float) -> int:
    """The index of the last fault injected before a job due at `execute_at` should have
    started; -1 before the first."""
    window = -1
    for index, event in enumerate(events):
        if execute_at + ON_TIME_SECONDS >= event.injected_at:
            window = index
    return window


def classify(
    created: list[Created],
    rows: dict[str, JobRow],
    deliveries: list[Delivery],
    events: list[FaultEvent],
    *,
    bound: float = BOUND_SECONDS,
) -> tuple[Tally, Tally, list[Tally]]:
    """Every job judged: in total, before the first fault, and per fault (as `events`)."""
    by_job: dict[str, list[Delivery]] = defaultdict(list)
    for delivery in deliveries:
        by_job[delivery.job_id].append(delivery)
    total, before, per_fault = Tally(), Tally(), [Tally() for _ in events]
    for job in created:
        index = window_of(events, job.execute_at)
        window = before if index < 0 else per_fault[index]
        event = events[index] if index >= 0 else None
        for tally in (total, window):
            _judge(job, rows.get(job.job_id), by_job.get(job.job_id, []), tally)
            _time(job, rows.get(job.job_id), by_job.get(job.job_id, []), tally, event, bound)
    return total, before, per_fault


def _time(
    job: Created,
    row: JobRow | None,
    delivered: list[Delivery],
    tally: Tally,
    event: FaultEvent | None,
    bound: float,
) -> None:
    """The job's lateness against the bound (a job never started is lost, not late)."""
    starts = [d.at for d in delivered] + ([row.started_at] if row and row.started_at else [])
    if not starts:
        return
    due = max(job.execute_at, job.acknowledged_at)
    lateness = min(starts) - (event.bound_from(due) if event is not None else due)
    if tally.max_late is None or lateness > tally.max_late:
        tally.max_late = lateness
        tally.latest = (
            f"{job.job_id} (shard {job.shard}): due {_clock(due)}, started {_clock(min(starts))}"
            f", {lateness:.2f}s late"
        )
    if lateness > bound:
        tally.over_bound += 1


def _clock(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S.%f")[:-3]


def _judge(job: Created, row: JobRow | None, delivered: list[Delivery], tally: Tally) -> None:
    tally.jobs += 1
    if row is None or row.status != "succeeded" or (job.handler == "http" and not delivered):
        tally.lost.append(f"{job.job_id} ({row.status if row else 'missing'})")
    attempts = Counter(d.attempt for d in delivered)
    if any(count > 1 for count in attempts.values()):
        tally.duplicate.append(f"{job.job_id} {dict(attempts)}")
    if len(attempts) > 1 or (row is not None and row.attempts > 1):
        tally.rerun += 1
    starts = [d.at for d in delivered] + ([row.started_at] if row and row.started_at else [])
    if starts and min(starts) < job.execute_at - CLOCK_SLACK:
        tally.early.append(f"{job.job_id} started {job.execute_at - min(starts):.3f}s early")
    due = max(job.execute_at, job.acknowledged_at)
    if starts and min(starts) - due > LATE_SECONDS:
        tally.late += 1


def recovery(
    event: FaultEvent,
    next_injected_at: float | None,
    created: list[Created],
    rows: dict[str, JobRow],
    acks: list[float],
    shards: int,
) -> dict:
    heal = event.healed_at
    first_start: dict[int, float] = {}
    last_late_start, last_late = None, None
    for job in created:
        row = rows.get(job.job_id)
        if row is None or row.started_at is None:
            continue
        if job.execute_at >= heal and row.started_at >= heal:
            first_start[row.shard] = min(first_start.get(row.shard, row.started_at), row.started_at)
        should_start = job.execute_at + ON_TIME_SECONDS
        in_window = event.injected_at <= should_start < (next_injected_at or float("inf"))
        due = max(job.execute_at, job.acknowledged_at)
        late = in_window and row.started_at - due > ON_TIME_SECONDS
        if late and (last_late_start is None or row.started_at > last_late_start):
            last_late_start = row.started_at
            last_late = {
                "job": job.job_id,
                "shard": row.shard,
                "late_s": round(row.started_at - due, 2),
            }
    running = max(first_start.values()) - heal if len(first_start) == shards else None
    api = next((at - heal for at in sorted(acks) if at >= heal), None)
    return {
        "running_again_s": None if running is None else round(running, 2),
        "on_time_again_s": 0.0
        if last_late_start is None
        else round(max(0.0, last_late_start - heal), 2),
        "api_again_s": None if api is None else round(api, 2),
        "last_late_job": last_late,
    }
