"""An urgent job of a user behind that user's own backlog: priority as the user feels it.

``priority_in_own_backlog``: one weight-1 user creates 50,000 no-op jobs (quick: 20,000)
at the default priority, due at once, through the API in bulk requests; through the drain
the same user creates 20 single jobs of priority 9, each due at its own moment. Reported:
started_at - execute_at of the urgent jobs (p50, p99, max), and how many were due while the
backlog still had 1,000 jobs to start. Target (issue 15): within 250 ms.

    make bench ARGS="--only priority_in_own_backlog"
"""

from __future__ import annotations

from jobsvc.jobs.priorities import PRIORITY_MAX
from tools.bench.api_create import served_api
from tools.bench.api_jobs import BULK, job_body, post_jobs, tokens_for
from tools.bench.fairness import (
    DRAIN_RATE_GUESS,
    _create_all,
    _started_with_due,
    _wait_until_all_finished,
    waits_behind,
)
from tools.bench.scenario_stack import clean_slate, describe_setup, scenario_env, started_workers

URGENT_JOBS = 20


def run_priority_in_own_backlog(context) -> dict:
    backlog = 20_000 if context.quick else 50_000
    env = scenario_env(context, "priority")
    with served_api(context, env=env) as api, clean_slate((1.0,)) as (user,):
        with started_workers(context, env, schedulers=2, executors=2) as workers:
            due = _create_all(api, {user: backlog})
            spacing = backlog / DRAIN_RATE_GUESS * 0.8 / URGENT_JOBS
            urgent_due = [due + 0.3 + i * spacing for i in range(URGENT_JOBS)]
            token = tokens_for([user])[user]
            for at in urgent_due:  # one job a request, created before it is due
                post_jobs(api, token, {**job_body(at), "priority": PRIORITY_MAX})
            _wait_until_all_finished(backlog + URGENT_JOBS, workers)
        rows = _started_with_due([user])
    urgent_at = set(urgent_due)
    urgent = [row for row in rows if _nearest(row[0], urgent_at)]
    backlog_starts = sorted(row[1] for row in rows if not _nearest(row[0], urgent_at))
    waits = waits_behind(urgent, backlog_starts)
    result = {
        "backlog_jobs": backlog,
        "urgent_jobs": waits["jobs"],
        "urgent_jobs_due_during_the_backlog": waits["due_during"],
        "wait_ms": waits["wait_ms"],
        "dispatched_minus_due_ms": waits["dispatched_minus_due_ms"],
        "backlog_drain_seconds": round(backlog_starts[-1] - backlog_starts[0], 2),
        "setup": describe_setup(
            schedulers=2,
            executors=2,
            extra=f"one weight-1 user's {backlog:,} no-op jobs due at once (API, requests of "
            f"{BULK:,}), and {URGENT_JOBS} single priority-{PRIORITY_MAX} jobs of the same "
            "user due through the drain",
        ),
    }
    result["markdown"] = (
        "| urgent jobs | due while the backlog had >= 1,000 to start | wait p50 | p99 | max |\n"
        "|---:|---:|---:|---:|---:|\n"
        f"| {result['urgent_jobs']} | {result['urgent_jobs_due_during_the_backlog']} | "
        f"{result['wait_ms']['p50']} ms | {result['wait_ms']['p99']} ms | "
        f"{result['wait_ms']['max']} ms |\n\n"
        f"Wait = started_at - execute_at; of it, dispatched_at - execute_at p50 "
        f"{result['dispatched_minus_due_ms']['p50']} ms, p99 "
        f"{result['dispatched_minus_due_ms']['p99']} ms. The backlog drained in "
        f"{result['backlog_drain_seconds']} s. Setup: {result['setup']}."
    )
    return result


def _nearest(execute_at: float, moments: set[float]) -> bool:
    """Whether the job was one of the urgent ones (its execute_at, to the microsecond)."""
    return any(abs(execute_at - moment) < 1e-3 for moment in moments)
