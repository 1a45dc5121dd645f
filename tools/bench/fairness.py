"""Fair share as users feel it: when their jobs *start*, across the whole system.

Jobs go in through the public API (gunicorn on the bench stack) in bulk requests of 1,000,
as users create them; what comes out is each job's ``started_at``, when an executor began
running it. The default topology runs: every shard, 2 schedulers, 2 executors.

- ``fairness_end_to_end``: users of weight 1, 2 and 4 each create N no-op jobs (30,000;
  quick: 20,000), all due at the same instant. Measured over the whole 1-second windows in
  which all three still had jobs waiting to start: each user's share of the started jobs
  against its weighted share (the deviation relative to that share), and Jain's index of
  share / weighted share.
- ``fairness_single_creates``: the same, but each job is created in a request of its own
  (``SINGLE_THREADS_PER_USER`` requests at a time per user), as clients that create jobs
  one by one do: each job's shard is its own id's, not dealt with its bulk request's.
- ``fairness_webhooks``: the same with jobs of the ``http`` handler (8,000 each; quick:
  3,000) delivered to a webhook receiver in the bench process: jobs that need a handler
  thread, which executors start only as threads come free. Also reported: how many
  deliveries the receiver saw per job.
- ``light_user_wait``: one weight-1 user floods 100,000 no-op jobs (quick: 30,000) due at
  once; another weight-1 user has 20 single jobs (created one at a time) due at moments
  spread through the flood's drain. Reported: started_at - execute_at of those 20 jobs
  (p50, p99, max), and how many were due while the flood still had 1,000 jobs to start.
- ``light_user_wait_webhooks``: the same with http-handler jobs to a webhook receiver in
  the bench process, a flood of 20,000 (quick: 8,000).
- ``light_user_due_now``: as ``light_user_wait``, but each light job is created at the
  moment it is due (``execute_at`` = the time of the request), as a user who wants a job
  run now creates it: no time to dispatch it ahead.

    make bench ARGS="--only fairness_end_to_end fairness_webhooks light_user_wait"
"""

from __future__ import annotations

import bisect
import os
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.db import connections

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
from tools.bench.job_times import save_job_times
from tools.bench.scenario_stack import (
    clean_slate,
    describe_setup,
    on_every_shard,
    scenario_env,
    started_workers,
    wait_for,
)
from tools.bench.shares import (
    backlogged_windows,
    jain_index,
    last_backlogged_second,
    per_second,
    percentile,
    shares,
    weighted_shares,
)
from tools.bench.stack_cpu import CpuUsed, CpuWindow
from tools.webhook_receiver import LOOPBACK_WEBHOOKS, Receiver

WEIGHTS = (1.0, 2.0, 4.0)
LIGHT_JOBS = 20
FLOOD_LEFT = 1000  # a light job counts if the flood had at least this many still to start
CREATE_THREADS_PER_USER = 2  # concurrent create requests per user
SINGLE_THREADS_PER_USER = 4  # the same for requests of one job each
SINGLE_CREATE_RATE_FLOOR = 400  # jobs/s single creates reach at least, on a busy 2-core VM
DRAIN_RATE_GUESS = 15_000  # jobs/s, to spread the light jobs through the flood's drain
WEBHOOK_DRAIN_RATE_GUESS = 800  # the same for webhook jobs (fairness_webhooks: 836/s)


def run_fairness_end_to_end(context) -> dict:
    per_user = 20_000 if context.quick else 30_000
    return _run_fairness(context, "fairness_end_to_end", per_user=per_user, webhooks=False)


def run_fairness_webhooks(context) -> dict:
    per_user = 3_000 if context.quick else 8_000
    return _run_fairness(context, "fairness_webhooks", per_user=per_user, webhooks=True)


def run_fairness_single_creates(context) -> dict:
    per_user = 10_000 if context.quick else 30_000
    return _run_fairness(
        context, "fairness_single_creates", per_user=per_user, webhooks=False, bulk=False
    )


def _run_fairness(
    context, scenario: str, *, per_user: int, webhooks: bool, bulk: bool = True
) -> dict:
    name = "fairness-webhooks" if webhooks else "fairness-e2e" if bulk else "fairness-single"
    with _stack(context, name, WEIGHTS, webhooks=webhooks) as stack:
        with started_workers(context, stack.env, schedulers=2, executors=2) as workers:
            jobs_per_user = dict.fromkeys(stack.users, per_user)
            creating = time.monotonic()
            if bulk:
                due = _create_all(stack.api, jobs_per_user, job_fields=stack.job_fields)
            else:
                due = _create_one_at_a_time(stack.api, jobs_per_user)
            create_rate = len(stack.users) * per_user / (time.monotonic() - creating)
            cpu_used = drain_cpu(due, len(stack.users) * per_user, workers)
        starts = _started(stack.users)
        if context.job_times:
            save_job_times(context.out, scenario, stack.users)
        deliveries = stack.receiver.deliveries() if stack.receiver else []
    jobs = (
        f"{per_user:,} jobs each of the http handler, delivered to a webhook receiver in the "
        "bench process (2 x 16 handler threads), created through the API in "
        if webhooks
        else f"{per_user:,} no-op jobs each, created through the API in "
    )
    jobs += (
        f"requests of {BULK:,}"
        if bulk
        else f"requests of one job ({SINGLE_THREADS_PER_USER} at a time per user)"
    )
    result = _fairness_result(starts, stack.users, due, jobs)
    result["created_jobs_per_second"] = round(create_rate)
    add_cpu(result, cpu_used, jobs=len(stack.users) * per_user)
    if webhooks:
        seen = Counter(Counter(delivery.job_id for delivery in deliveries).values())
        result["deliveries_per_job"] = {str(times): n for times, n in sorted(seen.items())}
        result["markdown"] += "\n\nDeliveries the receiver saw per job: " + ", ".join(
            f"{n:,} jobs {times}x" for times, n in sorted(seen.items())
        )
    return result


def _fairness_result(starts: dict[int, list[float]], users: list[int], due: float, jobs: str):
    label = {user: f"{weight:g}" for user, weight in zip(users, WEIGHTS, strict=True)}
    result = _shares(starts, {user: WEIGHTS[i] for i, user in enumerate(users)}, label)
    result["late_ms_p99"] = _ms(
        percentile(sorted(t - due for times in starts.values() for t in times), 99)
    )
    result["setup"] = describe_setup(
        schedulers=2,
        executors=2,
        extra=f"weights 1, 2, 4; {jobs}, all due at one instant",
    )
    result["markdown"] = _shares_markdown(result)
    return result


def run_light_user_wait(context) -> dict:
    return _run_light_user_wait(context, flood=30_000 if context.quick else 100_000, webhooks=False)


def run_light_user_wait_webhooks(context) -> dict:
    return _run_light_user_wait(context, flood=8_000 if context.quick else 20_000, webhooks=True)


def run_light_user_due_now(context) -> dict:
    return _run_light_user_wait(
        context, flood=30_000 if context.quick else 100_000, webhooks=False, due_now=True
    )


def _run_light_user_wait(context, *, flood: int, webhooks: bool, due_now: bool = False) -> dict:
    """One user's flood due at once, the other's LIGHT_JOBS single jobs due through its
    drain; the light jobs' waits, measured behind the flood's start times.

    ``due_now``: each light job is created at its due time, not before."""
    name = "light-user-webhooks" if webhooks else "light-user"
    drain_rate = WEBHOOK_DRAIN_RATE_GUESS if webhooks else DRAIN_RATE_GUESS
    with _stack(context, name, (1.0, 1.0), webhooks=webhooks) as stack:
        heavy, light = stack.users
        with started_workers(context, stack.env, schedulers=2, executors=2) as workers:
            due = _create_all(stack.api, {heavy: flood}, job_fields=stack.job_fields)
            spacing = flood / drain_rate * 0.8 / LIGHT_JOBS
            light_due = [due + 0.3 + i * spacing for i in range(LIGHT_JOBS)]
            token = tokens_for([light])[light]
            for at in light_due:  # one job a request
                if due_now:  # the schedule of the scenario's user, not a synchronisation
                    time.sleep(max(0.0, at - time.time()))
                    at = time.time()
                post_jobs(stack.api, token, job_body(at) | stack.job_fields)
            _wait_until_all_finished(flood + LIGHT_JOBS, workers)
        starts = _started([heavy])[heavy]
        light_rows = _started_with_due([light])
        timeline = _light_timeline(light)
    kind = (
        "http-handler jobs to a webhook receiver in the bench process" if webhooks else "no-op jobs"
    )
    light = "created at their due time" if due_now else "created before the flood was due"
    return _light_user_result(starts, light_rows, timeline, flood=flood, kind=kind, light=light)


def _light_user_result(
    starts: list[float],
    light_rows: list[tuple[float, float, float]],
    timeline: list[tuple[float, float, float, float, int]],
    *,
    flood: int,
    kind: str,
    light: str,
) -> dict:
    waits = waits_behind(light_rows, starts)
    result = {
        "flood_jobs": flood,
        "light_jobs": waits["jobs"],
        "light_jobs_due_during_the_flood": waits["due_during"],
        "wait_ms": waits["wait_ms"],
        "dispatched_minus_due_ms": waits["dispatched_minus_due_ms"],
        "flood_drain_seconds": round(max(starts) - min(starts), 2),
        # Each light job, by due time: seconds from the flood's first start to its due
        # time; milliseconds from due to created (the API's commit: a job created at its
        # due time is late by the request), from created to dispatched and from
        # dispatched to started; and its shard.
        "light_jobs_timeline": [
            [
                round(execute_at - min(starts), 3),
                _ms(created - execute_at),
                _ms(dispatched - created),
                _ms(started - dispatched),
                shard,
            ]
            for execute_at, created, dispatched, started, shard in timeline
        ],
        "setup": describe_setup(
            schedulers=2,
            executors=2,
            extra=f"a weight-1 user's {flood:,} {kind} due at once (API, requests of "
            f"{BULK:,}); another weight-1 user's {LIGHT_JOBS} single jobs due through the drain, "
            f"{light}",
        ),
    }
    result["markdown"] = (
        "| light jobs | due while the flood had >= 1,000 to start | wait p50 | p99 | max |\n"
        "|---:|---:|---:|---:|---:|\n"
        f"| {result['light_jobs']} | {result['light_jobs_due_during_the_flood']} | "
        f"{result['wait_ms']['p50']} ms | {result['wait_ms']['p99']} ms | "
        f"{result['wait_ms']['max']} ms |\n\n"
        f"Wait = started_at - execute_at; of it, dispatched_at - execute_at p50 "
        f"{result['dispatched_minus_due_ms']['p50']} ms, p99 "
        f"{result['dispatched_minus_due_ms']['p99']} ms. The flood drained in "
        f"{result['flood_drain_seconds']} s. Setup: {result['setup']}."
    )
    return result


def waits_behind(rows: list[tuple[float, float, float]], other_starts: list[float]) -> dict:
    """Waits of single jobs due during a drain: rows of (execute_at, started, dispatched).

    ``due_during``: how many were due while the drain still had ``FLOOD_LEFT`` jobs of
    ``other_starts`` to start (the ones that measure waiting behind it).
    """
    waits = sorted(started - execute_at for execute_at, started, _ in rows)
    dispatch_waits = sorted(dispatched - execute_at for execute_at, _, dispatched in rows)
    ordered_starts = sorted(other_starts)
    return {
        "jobs": len(waits),
        "due_during": sum(
            1
            for execute_at, _, _ in rows
            if len(ordered_starts) - bisect.bisect_right(ordered_starts, execute_at) >= FLOOD_LEFT
        ),
        "wait_ms": {
            "p50": _ms(percentile(waits, 50)),
            "p99": _ms(percentile(waits, 99)),
            "max": _ms(waits[-1]),
        },
        "dispatched_minus_due_ms": {
            "p50": _ms(percentile(dispatch_waits, 50)),
            "p99": _ms(percentile(dispatch_waits, 99)),
        },
    }


# --- the stack -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Stack:
    env: dict[str, str]  # the workers' environment
    api: str  # the API's base URL
    users: list[int]
    receiver: Receiver | None  # with webhooks: where the jobs are delivered
    job_fields: dict  # what every job carries: with webhooks, the http handler to receiver


@contextmanager
def _stack(context, name: str, weights, *, webhooks: bool) -> Iterator[_Stack]:
    """The scenario's environment, an API, fresh users of these weights and, with
    webhooks, a receiver the jobs are delivered to."""
    env = scenario_env(context, name, **(LOOPBACK_WEBHOOKS if webhooks else {}))
    with ExitStack() as stack:
        receiver = stack.enter_context(Receiver()) if webhooks else None
        api = stack.enter_context(served_api(context, env=env))
        users = stack.enter_context(clean_slate(weights))
        job_fields = (
            {"handler": "http", "handler_params": {"url": receiver.url}} if receiver else {}
        )
        yield _Stack(env, api, users, receiver, job_fields)


def _create_all(
    api: str, jobs_per_user: dict[int, int], *, job_fields: dict | None = None
) -> float:
    """Every user creates its jobs at once, in bulk requests; return when they are due.

    ``job_fields`` go into every job (the handler and its parameters, say)."""
    tokens = tokens_for(jobs_per_user)
    expected = sum(jobs_per_user.values()) / CREATE_RATE_FLOOR  # seconds to create them all
    due = time.time() + CREATE_LEAD + expected

    def create(user_part: tuple[int, int]) -> None:
        user, part = user_part
        for start in range(part * BULK, jobs_per_user[user], BULK * CREATE_THREADS_PER_USER):
            count = min(BULK, jobs_per_user[user] - start)
            post_jobs(api, tokens[user], [job_body(due) | (job_fields or {})] * count)

    parts = [(user, part) for user in jobs_per_user for part in range(CREATE_THREADS_PER_USER)]
    create_before(due, create, parts, threads=len(parts))
    return due


def _create_one_at_a_time(api: str, jobs_per_user: dict[int, int]) -> float:
    """Every user creates its jobs one a request, SINGLE_THREADS_PER_USER requests at a
    time, users side by side; return when the jobs are due (after every request is done).
    Each job's shard is then its own id's, as for any single create."""
    tokens = tokens_for(jobs_per_user)
    expected = sum(jobs_per_user.values()) / SINGLE_CREATE_RATE_FLOOR
    due = time.time() + CREATE_LEAD + expected
    body = job_body(due)

    def create(user_part: tuple[int, int]) -> None:
        user, part = user_part
        for _ in range(part, jobs_per_user[user], SINGLE_THREADS_PER_USER):
            post_jobs(api, tokens[user], body)

    parts = [(user, part) for user in jobs_per_user for part in range(SINGLE_THREADS_PER_USER)]
    create_before(due, create, parts, threads=len(parts))
    return due


def drain_cpu(due: float, total: int, workers) -> CpuUsed:
    """Wait until all ``total`` jobs due at ``due`` succeeded; the CPU the stack used from
    just before the schedulers may dispatch them (every create request is done by then)
    until then: the drain's work."""
    # The scenario's schedule, not a synchronisation: nothing is dispatched before then.
    time.sleep(max(0.0, due - settings.SCHEDULER_DISPATCH_AHEAD - 0.5 - time.time()))
    window = CpuWindow()
    window.start()
    _wait_until_all_finished(total, workers)
    return window.stop()  # before the workers stop, while their CPU time is readable


def add_cpu(result: dict, used: CpuUsed, *, jobs: int) -> None:
    """The drain's CPU per started job by kind of process and the cores it kept busy,
    into the scenario's result and its Markdown."""
    per_job, cores = used.per_job_us(jobs), used.cores()
    result["cpu_us_per_started_job"], result["cores_busy"] = per_job, cores
    result["markdown"] += (
        f"\n\nCPU per started job, from just before the jobs were due until the last "
        f"finished: {per_job['total']:.0f} µs (executors {per_job.get('executor', 0):.0f}, "
        f"schedulers {per_job.get('scheduler', 0):.0f}, PostgreSQL "
        f"{per_job.get('postgres', 0):.0f}, broker {per_job.get('broker', 0):.0f}, other "
        f"{per_job.get('other', 0):.0f}); cores busy meanwhile: the stack {cores['stack']}, "
        f"the machine {cores['machine']} of {os.cpu_count()}."
    )


def _wait_until_all_finished(total: int, workers) -> None:
    def finished() -> bool:
        rows = on_every_shard("SELECT count(*) FROM jobs WHERE status = 'succeeded'")
        return sum(n for (n,) in rows) >= total

    wait_for(finished, timeout=300, what=f"all {total:,} jobs succeeded", workers=workers)
    connections.close_all()


def _started(users: list[int]) -> dict[int, list[float]]:
    starts: dict[int, list[float]] = defaultdict(list)
    rows = on_every_shard(
        "SELECT user_id, extract(epoch FROM started_at)::float8 FROM jobs"
        " WHERE user_id = ANY(%(users)s)",
        {"users": users},
    )
    for user, started in rows:
        starts[user].append(started)
    return starts


def _light_timeline(user: int) -> list[tuple[float, float, float, float, int]]:
    """The user's jobs by due time: (execute_at, created_at, dispatched_at, started_at,
    shard), the times in epoch seconds."""
    return sorted(
        on_every_shard(
            "SELECT extract(epoch FROM execute_at)::float8,"
            " extract(epoch FROM created_at)::float8,"
            " extract(epoch FROM dispatched_at)::float8,"
            " extract(epoch FROM started_at)::float8, shard_id"
            " FROM jobs WHERE user_id = %(user)s",
            {"user": user},
        )
    )


def _started_with_due(users: list[int]) -> list[tuple[float, float, float]]:
    return on_every_shard(
        "SELECT extract(epoch FROM execute_at)::float8, extract(epoch FROM started_at)::float8,"
        " extract(epoch FROM dispatched_at)::float8"
        " FROM jobs WHERE user_id = ANY(%(users)s)",
        {"users": users},
    )


# --- numbers ---------------------------------------------------------------------------


def _shares(
    starts: dict[int, list[float]], weight_of: dict[int, float], label: dict[int, str]
) -> dict:
    """Shares of started jobs per whole second while every user still had jobs to start."""
    first = min(min(times) for times in starts.values())
    started_per_second = per_second(starts, since=first)
    ideal = weighted_shares(weight_of)
    windows = []
    for second, counts in enumerate(backlogged_windows(starts)):
        share = shares(counts, list(weight_of))
        windows.append(
            {
                "second": second,
                "started": sum(counts.values()) or 1,
                "shares": {label[u]: round(s, 4) for u, s in share.items()},
                "max_relative_deviation": round(
                    max(abs(share[u] - ideal[u]) / ideal[u] for u in weight_of), 4
                ),
                "jain": round(jain_index([share[u] / ideal[u] for u in weight_of]), 5),
            }
        )
    last_second = shares(last_backlogged_second(starts), list(weight_of))
    seconds = len(windows)
    contended = Counter()
    for second in range(seconds):
        contended.update(started_per_second[second])
    n = sum(contended.values()) or 1
    drain = max(max(times) for times in starts.values()) - first
    return {
        "windows": windows,
        "ideal_shares": {label[u]: round(s, 4) for u, s in ideal.items()},
        "contended_seconds": seconds,
        "contended_shares": {label[u]: round(contended[u] / n, 4) for u in weight_of},
        "worst_window_relative_deviation": max(
            (w["max_relative_deviation"] for w in windows), default=None
        ),
        "jain_min": min((w["jain"] for w in windows), default=None),
        # The second before the first user's last start: see last_backlogged_second.
        "last_second_shares": {label[u]: round(s, 4) for u, s in last_second.items()},
        "last_second_relative_deviation": round(
            max(abs(last_second[u] - ideal[u]) / ideal[u] for u in weight_of), 4
        ),
        "jain_mean": round(statistics.fmean(w["jain"] for w in windows), 5) if windows else None,
        "started_per_second": {
            label[u]: [started_per_second[s][u] for s in range(int(drain) + 1)] for u in weight_of
        },
        "jobs_per_second": round(sum(len(t) for t in starts.values()) / drain, 1),
    }


def _shares_markdown(result: dict) -> str:
    lines = [
        "| weight | weighted share | share of started jobs (contended) |",
        "|---:|---:|---:|",
    ]
    for weight, ideal in result["ideal_shares"].items():
        lines.append(f"| {weight} | {ideal:.3f} | {result['contended_shares'][weight]:.3f} |")
    if result["contended_seconds"]:
        windows = (
            f"{result['contended_seconds']} whole 1-s windows with every user still waiting; "
            f"worst window {result['worst_window_relative_deviation']:.0%} off a user's share; "
            f"Jain's index of share/weighted share: min {result['jain_min']}, mean "
            f"{result['jain_mean']}."
        )
    else:
        windows = (
            "No whole 1-s window with every user still waiting: the first user ran out within "
            "a second, too soon to measure shares per window (run more jobs)."
        )
    last = ", ".join(f"{share:.3f}" for share in result["last_second_shares"].values())
    windows += (
        f" In the second before the first user ran out, shares {last}: "
        f"{result['last_second_relative_deviation']:.0%} off."
    )
    lines += [
        "",
        f"{windows} Whole run {result['jobs_per_second']:,.0f} started jobs/s; started minus "
        f"due p99 {result['late_ms_p99']} ms.",
        "",
        f"Setup: {result['setup']}.",
    ]
    return "\n".join(lines)


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)
