"""Jobs on time beside a flood: the design peak's steady stream while a backlog drains.

``steady_beside_flood``: ten weight-1 users' jobs due at the design peak rate (1,389 a
second) for 30 s (quick: 15 s), and an eleventh user's 100,000 no-op jobs (quick: 30,000)
all due 5 s into the stream, every job created through the API in bulk requests before
the first is due. Reported: started_at - execute_at of the stream's jobs (all of them, and
those due while the flood drained), and how fast the flood drained.
What it shows: whether on-time jobs stay on time behind a flood, and what a steady stream
of jobs coming due (the executor lets them in between its claims) costs the flood.

    make bench ARGS="--only steady_beside_flood"
"""

from __future__ import annotations

import time

from tools.bench.api_create import served_api
from tools.bench.api_jobs import (
    BULK,
    CREATE_LEAD,
    CREATE_RATE_FLOOR,
    create_before,
    job_body,
    post_jobs,
    tokens_for,
)
from tools.bench.fairness import (
    _started,
    _started_with_due,
    _wait_until_all_finished,
    waits_behind,
)
from tools.bench.scenario_stack import (
    PEAK_RATE,
    clean_slate,
    describe_setup,
    scenario_env,
    started_workers,
)

STREAM_USERS = 10
FLOOD_AFTER = 5.0  # seconds from the stream's first due job to the flood's due time


def run_steady_beside_flood(context) -> dict:
    seconds = 15 if context.quick else 30
    flood = 30_000 if context.quick else 100_000
    stream = PEAK_RATE * seconds
    env = scenario_env(context, "steady-flood")
    with (
        served_api(context, env=env) as api,
        clean_slate((1.0,) * (STREAM_USERS + 1)) as users,
    ):
        stream_users, flood_user = users[:STREAM_USERS], users[STREAM_USERS]
        with started_workers(context, env, schedulers=2, executors=2) as workers:
            tokens = tokens_for(users)
            first_due = time.time() + CREATE_LEAD + (stream + flood) / CREATE_RATE_FLOOR
            requests = _stream_requests(stream_users, stream, first_due)
            requests += [
                (flood_user, [job_body(first_due + FLOOD_AFTER)] * min(BULK, flood - start))
                for start in range(0, flood, BULK)
            ]
            create_before(
                first_due,
                lambda request: post_jobs(api, tokens[request[0]], request[1]),
                requests,
                threads=8,
            )
            _wait_until_all_finished(stream + flood, workers)
        flood_starts = sorted(_started([flood_user])[flood_user])
        stream_rows = _started_with_due(stream_users)
    all_waits = waits_behind(stream_rows, [])
    during = [row for row in stream_rows if first_due + FLOOD_AFTER <= row[0] <= flood_starts[-1]]
    behind = waits_behind(during, flood_starts)
    drain = flood_starts[-1] - flood_starts[0]
    result = {
        "stream_jobs": stream,
        "stream_wait_ms": all_waits["wait_ms"],
        "stream_jobs_due_while_the_flood_drained": behind["jobs"],
        "their_wait_ms": behind["wait_ms"],
        "their_dispatched_minus_due_ms": behind["dispatched_minus_due_ms"],
        "flood_jobs": flood,
        "flood_drain_seconds": round(drain, 2),
        "flood_jobs_per_second": round(flood / drain),
        "setup": describe_setup(
            schedulers=2,
            executors=2,
            extra=f"{STREAM_USERS} weight-1 users' no-op jobs due at {PEAK_RATE:,}/s for "
            f"{seconds} s, and another weight-1 user's {flood:,} no-op jobs due at once "
            f"{FLOOD_AFTER:g} s into the stream; all created through the API in requests of "
            f"up to {BULK:,} before the first was due",
        ),
    }
    result["markdown"] = (
        "| stream jobs | wait p50 | p99 | max | due while the flood drained "
        "| their wait p99 | max | flood drained in |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        f"| {stream:,} | {all_waits['wait_ms']['p50']} ms | {all_waits['wait_ms']['p99']} ms | "
        f"{all_waits['wait_ms']['max']} ms | {behind['jobs']:,} | "
        f"{behind['wait_ms']['p99']} ms | {behind['wait_ms']['max']} ms | "
        f"{result['flood_drain_seconds']} s ({result['flood_jobs_per_second']:,} jobs/s) |\n\n"
        f"Wait = started_at - execute_at; of the wait of those due while the flood drained, "
        f"dispatched_at - execute_at p50 {behind['dispatched_minus_due_ms']['p50']} ms, p99 "
        f"{behind['dispatched_minus_due_ms']['p99']} ms (negative: sent ahead, held by the "
        f"executor). Setup: {result['setup']}."
    )
    return result


def _stream_requests(
    users: list[int], total: int, first_due: float
) -> list[tuple[int, list[dict]]]:
    """The stream's create requests: job ``i`` is due at ``first_due + i / PEAK_RATE`` and
    belongs to user ``i % len(users)``; each user's jobs in requests of up to BULK."""
    requests = []
    for index, user in enumerate(users):
        mine = [first_due + i / PEAK_RATE for i in range(index, total, len(users))]
        requests += [
            (user, [job_body(at) for at in mine[start : start + BULK]])
            for start in range(0, len(mine), BULK)
        ]
    return requests
