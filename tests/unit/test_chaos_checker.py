"""The chaos campaign's checker: how a job's history is classified, and which fault it
counts under (tools/chaos/checker.py)."""

from __future__ import annotations

from tools.chaos.checker import classify, recovery
from tools.chaos.faults import FaultEvent
from tools.chaos.history import JobRow
from tools.chaos.workload import Created
from tools.webhook_receiver import Delivery

DUE = 1000.0
FAULT = FaultEvent("kill scheduler-0", "", injected_at=990.0, healed_at=991.0)


def created(job_id: str, *, handler: str = "http", due: float = DUE) -> Created:
    return Created(job_id, shard=0, handler=handler, execute_at=due, acknowledged_at=due - 2)


def row(job_id: str, *, status="succeeded", attempts=1, started=DUE + 0.1, shard=0) -> JobRow:
    return JobRow(job_id, status, attempts, DUE, started, started + 0.1, shard=shard)


def delivery(job_id: str, attempt: int = 1, at: float = DUE + 0.1) -> Delivery:
    return Delivery(job_id, attempt, f"{job_id}:{attempt}", at)


def test_a_job_delivered_once_on_time_counts_as_nothing_but_a_job():
    total, _, _ = classify([created("a")], {"a": row("a")}, [delivery("a")], [FAULT])

    assert total.as_dict() | {"examples": None} == {
        "jobs": 1, "lost": 0, "duplicate": 0, "rerun": 0, "early": 0, "late": 0,
        "max_late_s": 0.1, "over_bound": 0, "examples": None,
    }  # fmt: skip


def test_unfinished_missing_and_undelivered_http_jobs_are_lost():
    jobs = [created("queued"), created("missing"), created("never-delivered")]
    rows = {"queued": row("queued", status="queued"), "never-delivered": row("never-delivered")}

    total, _, _ = classify(jobs, rows, [delivery("queued")], [FAULT])

    assert len(total.lost) == 3


def test_a_noop_job_needs_no_delivery():
    total, _, _ = classify([created("n", handler="default")], {"n": row("n")}, [], [FAULT])

    assert total.lost == []


def test_one_attempt_delivered_twice_is_a_duplicate_two_attempts_a_rerun():
    jobs = [created("dup"), created("rerun")]
    rows = {"dup": row("dup"), "rerun": row("rerun", attempts=2)}
    deliveries = [delivery("dup"), delivery("dup"), delivery("rerun", 1), delivery("rerun", 2)]

    total, _, _ = classify(jobs, rows, deliveries, [FAULT])

    assert [len(total.duplicate), total.rerun] == [1, 1]
    assert total.duplicate[0].startswith("dup ")


def test_a_start_or_a_delivery_before_execute_at_is_early():
    jobs = [created("row-early"), created("delivery-early")]
    rows = {
        "row-early": row("row-early", started=DUE - 0.5),
        "delivery-early": row("delivery-early"),
    }
    deliveries = [delivery("row-early"), delivery("delivery-early", at=DUE - 0.5)]

    total, _, _ = classify(jobs, rows, deliveries, [FAULT])

    assert len(total.early) == 2


def test_a_job_counts_under_the_fault_whose_window_holds_its_due_time():
    later = FaultEvent("restart broker", "", injected_at=1005.0, healed_at=1006.0)
    jobs = [created("before", due=980.0), created("first"), created("second", due=1010.0)]
    rows = {job.job_id: row(job.job_id) for job in jobs}
    deliveries = [delivery(job.job_id, at=2000.0) for job in jobs]

    _, before, per_fault = classify(jobs, rows, deliveries, [FAULT, later])

    assert [before.jobs, *(tally.jobs for tally in per_fault)] == [1, 1, 1]


def test_a_job_due_just_before_a_fault_counts_under_that_fault():
    jobs = [created("just-before", due=FAULT.injected_at - 0.5)]

    _, before, [during] = classify(jobs, {"just-before": row("just-before")}, [], [FAULT])

    assert [before.jobs, during.jobs] == [0, 1]


def test_recovery_waits_for_every_shard_and_for_the_last_late_start():
    jobs = [created("late", due=992.0), created("s0", due=995.0), created("s1", due=996.0)]
    rows = {
        "late": row("late", started=999.0),  # 7 s late, started 8 s after the heal
        "s0": row("s0", started=995.1, shard=0),
        "s1": row("s1", started=996.2, shard=1),
    }

    measured = recovery(FAULT, None, jobs, rows, acks=[990.5, 991.5], shards=2)

    assert measured["running_again_s"] == 5.2  # shard 1's first new job, 996.2 - 991
    assert measured["on_time_again_s"] == 8.0
    assert measured["api_again_s"] == 0.5
    assert measured["last_late_job"]["job"] == "late"


def test_a_shard_that_never_runs_a_new_job_has_not_recovered():
    jobs = [created("s0", due=995.0)]

    measured = recovery(FAULT, None, jobs, {"s0": row("s0", started=995.1)}, acks=[], shards=2)

    assert measured["running_again_s"] is None
    assert measured["api_again_s"] is None


# --- lateness against the bound --------------------------------------------------------

WORKER_FAULT = FaultEvent(
    "pause executor-0", "", injected_at=990.0, healed_at=1020.0, takeover=True
)
SERVER_FAULT = FaultEvent("restart broker", "", injected_at=990.0, healed_at=1020.0)


def started(job_id: str, at: float) -> tuple[list[Created], dict[str, JobRow]]:
    return [created(job_id, handler="default")], {job_id: row(job_id, started=at)}


def test_under_one_workers_fault_lateness_counts_from_the_due_time():
    jobs, rows = started("j", DUE + 12.0)

    _, _, [during] = classify(jobs, rows, [], [WORKER_FAULT], bound=10.0)

    assert during.max_late == 12.0
    assert during.over_bound == 1


def test_under_a_servers_fault_lateness_counts_from_the_heal_if_that_is_later():
    jobs, rows = started("j", 1020.0 + 3.0)  # due at 1000, 3 s after the heal at 1020

    _, _, [during] = classify(jobs, rows, [], [SERVER_FAULT], bound=10.0)

    assert during.max_late == 3.0
    assert during.over_bound == 0


def test_a_job_due_after_the_heal_counts_from_its_due_time_under_any_fault():
    event = FaultEvent("restart broker", "", injected_at=990.0, healed_at=995.0)
    jobs, rows = started("j", DUE + 11.0)

    _, _, [during] = classify(jobs, rows, [], [event], bound=10.0)

    assert during.max_late == 11.0
    assert during.over_bound == 1


def test_a_compound_faults_bound_starts_at_its_latest_servers_heal():
    kill = FaultEvent("kill executor-0", "", 990.0, 991.0, takeover=True)
    restart = FaultEvent("restart shard db", "", 990.0, 1005.0)
    both = FaultEvent(
        "kill executor-0 + restart shard db", "", 990.0, 1005.0, parts=(kill, restart)
    )
    jobs, rows = started("j", 1005.0 + 4.0)

    _, _, [during] = classify(jobs, rows, [], [both], bound=10.0)

    assert during.max_late == 4.0


def test_the_first_start_is_the_one_that_counts_and_the_latest_job_is_named():
    jobs = [created("a", handler="http"), created("b", handler="default")]
    rows = {"a": row("a", started=DUE + 9.0, attempts=2), "b": row("b", started=DUE + 2.0)}
    deliveries = [delivery("a", 1, at=DUE + 1.0), delivery("a", 2, at=DUE + 9.0)]

    _, _, [during] = classify(jobs, rows, deliveries, [WORKER_FAULT], bound=10.0)

    assert during.max_late == 2.0
    assert during.latest.startswith("b (shard 0)")


def test_a_job_that_never_started_is_lost_not_late():
    never = JobRow("never", "queued", 0, DUE, None, None, shard=0)

    _, _, [during] = classify([created("never", handler="default")], {"never": never}, [],
                              [WORKER_FAULT])  # fmt: skip

    assert len(during.lost) == 1
    assert during.max_late is None
