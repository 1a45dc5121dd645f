"""Scheduler benchmarks: real scheduler (and executor) processes on the bench stack, measured
from the shard databases (every dispatch stamps ``dispatched_at`` with the database clock).

- ``dispatch_throughput``: one scheduler worker publishing a large overdue backlog (1,000,000
  jobs; quick: 100,000) with no in-flight cap and no executors: jobs per second.
- ``dispatch_batch_selection``: one dispatch round's ``due_users`` + ``claim``, in process,
  on a shard holding 1,000,000 overdue jobs of one user plus a few of others, against the
  same with 10,000: the round should cost about the same.
- ``dispatch_lateness``: jobs due uniformly at the design peak (1,389 per second for 60 s;
  quick: 20 s), created through the API beforehand (requests of 1,000, 10 users), with
  two schedulers and two executors: ``dispatched_at - due_at`` and ``started_at -
  due_at`` percentiles (target: p99 of both under 100 ms).
- ``dispatch_fairness``: users of weights 1, 2 and 4, all backlogged (for 45 s; quick: 15 s),
  default batch size and in-flight cap, one scheduler and two executors draining: each
  user's share of the dispatches in every whole 1-second window in which every user still
  had due jobs on every shard, against its weighted share, and Jain's fairness index.

Backlogs are written straight into the shards (``tools.bench.scenario_stack``).
"""

from __future__ import annotations

import itertools
import json
import statistics
import time
from collections import Counter, defaultdict
from datetime import timedelta

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from jobsvc.sharding.shards import shard_alias
from scheduler_worker import queries
from scheduler_worker.shard_store import ShardStore, picked_hand
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
from tools.bench.scenario_stack import (
    PEAK_RATE,
    analyze,
    any_job,
    clean_slate,
    database_now,
    describe_setup,
    load_jobs,
    load_spread,
    on_every_shard,
    scenario_env,
    started_workers,
    wait_for,
)
from tools.bench.shares import jain_index, percentile

SELECTION_BATCH = 600  # jobs per measured round: 15 rounds leave the 10,000 backlog non-empty
SELECTION_ROUNDS = 15  # measured rounds per backlog size
SELECTION_LIGHT_USERS = 5  # users with a few due jobs next to the heavy one
SELECTION_LIGHT_JOBS = 20  # due jobs of each light user
FAIRNESS_WEIGHTS = (1.0, 2.0, 4.0)
# The in-flight limit of a scheduler publishing a backlog with no executors: above any.
UNLIMITED_IN_FLIGHT = 100_000_000
# The selection queries' parameter: jobs due now (the backlog), none dispatched ahead.
_DUE_NOW = {"ahead": 0.0}


# --- statistics -----------------------------------------------------------------------


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


# --- (a) throughput -------------------------------------------------------------------


def run_throughput(context) -> dict:
    total = 100_000 if context.quick else 1_000_000
    users = 10
    with clean_slate():
        load_started = time.monotonic()
        past = timezone.now() - timedelta(hours=1)
        load_spread(list(range(1, users + 1)), total // users, lambda i: past)
        load_seconds = time.monotonic() - load_started
        # No executor claims a job: its queued lease must outlast the whole dispatch, or
        # the sweeper makes the first jobs due again while the last go out (a million
        # took about the default 60 s on a slow day), and the backlog never empties.
        env = scenario_env(context, "throughput", JOBSVC_SCHEDULER_QUEUED_TIMEOUT_SECONDS="3600")
        with started_workers(
            context,
            env,
            schedulers=1,
            executors=0,
            scheduler_args=(
                "--max-in-flight",
                str(UNLIMITED_IN_FLIGHT),
                "--in-flight-seconds",
                "0",
            ),
        ) as workers:
            wait_for(
                lambda: not any_job("status = 'scheduled'"),
                timeout=120 + total / 2000,
                what="the whole backlog is dispatched",
                workers=workers,
            )
        claims = on_every_shard(
            "SELECT dispatched_at, count(*) FROM jobs WHERE status = 'queued' GROUP BY 1"
        )
    # Every claim stamps its jobs with its transaction's start, so the rate is the jobs
    # claimed before the last claim over the time from the first claim to the last.
    first, last = min(at for at, _ in claims), max(at for at, _ in claims)
    queued = sum(n for _, n in claims)
    seconds = (last - first).total_seconds()
    before_last = sum(n for at, n in claims if at < last)
    result = {
        "jobs": total,
        "users": users,
        "load_seconds": round(load_seconds, 1),
        "queued": queued,
        "claims": len(claims),
        "first_to_last_claim_seconds": round(seconds, 2),
        "jobs_per_second": round(before_last / seconds),
    }
    result["setup"] = describe_setup(
        schedulers=1,
        executors=0,
        extra=f"--max-in-flight {UNLIMITED_IN_FLIGHT:,} (no executors), "
        f"{total:,} overdue jobs of {users} users spread evenly over the shards",
    )
    result["markdown"] = "\n".join(
        [
            "| backlog | dispatched | claims | first to last claim (s) | jobs/s |",
            "|---:|---:|---:|---:|---:|",
            f"| {total:,} | {queued:,} | {len(claims):,} | {seconds:.2f} | "
            f"{result['jobs_per_second']:,} |",
            "",
            f"Setup: {result['setup']}. Rate: jobs claimed before the last claim over the time "
            "from the first claim to the last (claim times are the database's). "
            "Target: at least 20,000 jobs/s.",
        ]
    )
    return result


# --- (b) batch selection --------------------------------------------------------------


def run_batch_selection(context) -> dict:
    rows = [_selection_at(size) for size in (10_000, 1_000_000)]
    small, large = rows
    choose_ratio = large["choose_ms_median"] / small["choose_ms_median"]
    round_ratio = large["round_ms_median"] / small["round_ms_median"]
    lines = [
        "| heavy user's overdue jobs | due_users ms | pick ms | choose ms (due_users + pick) "
        "| claim ms (pick + update + commit) | round ms (due_users + claim) | round ms max "
        "| buffers: due_users / pick / claim |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['heavy_jobs']:,} | {row['due_users_ms_median']} | {row['pick_ms_median']} "
            f"| {row['choose_ms_median']} | {row['claim_ms_median']} | {row['round_ms_median']} "
            f"| {row['round_ms_max']} | {row['due_users_buffers']} / {row['pick_buffers']} / "
            f"{row['claim_buffers']} |"
        )
    setup = (
        f"shard 0 alone, in process (ShardStore); {SELECTION_LIGHT_USERS} light users with "
        f"{SELECTION_LIGHT_JOBS} overdue jobs each next to the heavy user; medians of "
        f"{SELECTION_ROUNDS} rounds of {SELECTION_BATCH} jobs, claims committed; buffers: "
        "shared blocks hit + read in EXPLAIN (ANALYZE, BUFFERS) of one more round"
    )
    lines += [
        "",
        f"Choosing a batch on the shard with {large['heavy_jobs']:,} jobs costs "
        f"{choose_ratio:.2f}x what it costs with {small['heavy_jobs']:,}; the whole round "
        f"(which also updates the {SELECTION_BATCH:,} rows it takes, in larger indexes) "
        f"{round_ratio:.2f}x. Setup: {setup}.",
    ]
    return {
        "rounds": rows,
        "choose_ratio_large_to_small": round(choose_ratio, 2),
        "round_ratio_large_to_small": round(round_ratio, 2),
        "setup": setup,
        "markdown": "\n".join(lines),
    }


def _selection_at(heavy_jobs: int) -> dict:
    shard_id = 0
    alias = shard_alias(shard_id)
    light = range(2, 2 + SELECTION_LIGHT_USERS)
    with clean_slate():
        past = timezone.now() - timedelta(hours=1)
        load_jobs(
            shard_id,
            itertools.chain(
                ((1, past + timedelta(milliseconds=i % 3_600_000)) for i in range(heavy_jobs)),
                ((user, past) for user in light for _ in range(SELECTION_LIGHT_JOBS)),
            ),
        )
        analyze()
        store = ShardStore(alias=alias, shard_id=shard_id)
        epoch = store.acquire_lease(owner="bench-selection")
        timings = defaultdict(list)
        for _ in range(SELECTION_ROUNDS):
            started = time.perf_counter()
            users = store.due_users()
            selected = time.perf_counter()
            params = _quota_params(users)
            with connections[alias].cursor() as cursor:
                cursor.execute(queries.PICK_FOR_DISPATCH, {**params, **_DUE_NOW})
                cursor.fetchall()
            picked = time.perf_counter()
            store.claim(
                epoch=epoch,
                quotas=dict(zip(params["user_ids"], params["quotas"], strict=True)),
                queued_timeout=3600.0,
            )
            claimed = time.perf_counter()
            timings["due_users"].append(selected - started)
            timings["pick"].append(picked - selected)
            timings["choose"].append(picked - started)
            timings["claim"].append(claimed - picked)
            timings["round"].append(claimed - picked + selected - started)
        buffers = _explain_round(alias, epoch)
        store.close()
    return {
        "heavy_jobs": heavy_jobs,
        **{f"{name}_ms_median": _ms(statistics.median(values)) for name, values in timings.items()},
        "round_ms_max": _ms(max(timings["round"])),
        **{f"{name}_buffers": n for name, n in buffers.items()},
    }


def _quota_params(users: list[int]) -> dict:
    """A round of ``SELECTION_BATCH`` jobs shared equally among the due users."""
    quota = max(1, SELECTION_BATCH // max(1, len(users)))
    return {"user_ids": list(users), "quotas": [quota] * len(users)}


def _explain_round(alias: str, epoch: int) -> dict[str, int]:
    """Shared buffers touched by one more round's queries (its claim rolled back)."""
    buffers = {}
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {queries.DUE_USERS}", _DUE_NOW)
        buffers["due_users"] = _buffers(_plan(cursor.fetchone()[0]))
        cursor.execute(queries.DUE_USERS, _DUE_NOW)
        params = _quota_params([user for (user,) in cursor.fetchall()])
        cursor.execute(
            f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {queries.PICK_FOR_DISPATCH}",
            {**params, **_DUE_NOW},
        )
        buffers["pick"] = _buffers(_plan(cursor.fetchone()[0]))
        cursor.execute(queries.PICK_FOR_DISPATCH, {**params, **_DUE_NOW})
        picked = cursor.fetchall()
        hand = picked_hand(picked, [None] * len(picked))
        cursor.execute(
            f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {queries.CLAIM_PICKED}",
            {**hand, "epoch": epoch, "queued_timeout": 3600.0},
        )
        # The claim picks, then updates what it picked.
        buffers["claim"] = buffers["pick"] + _buffers(_plan(cursor.fetchone()[0]))
        transaction.set_rollback(True, using=alias)  # EXPLAIN ANALYZE really claimed them
    return buffers


def _plan(raw) -> dict:
    parsed = json.loads(raw) if isinstance(raw, str) else raw
    return parsed[0]["Plan"]


def _buffers(plan: dict) -> int:
    return plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)


# --- (c) lateness at the design peak --------------------------------------------------


def _create_spread(api: str, users: list[int], total: int) -> None:
    """``total`` jobs due at PEAK_RATE a second, job ``i`` of all the user ``i % users``'s,
    created through the API in requests of up to BULK jobs (each lands on one shard, as a
    bulk create does), all before the first is due."""
    tokens = tokens_for(users)
    first_due = time.time() + CREATE_LEAD + total / CREATE_RATE_FLOOR

    def create(index: int) -> None:
        mine = [first_due + i / PEAK_RATE for i in range(index, total, len(users))]
        for start in range(0, len(mine), BULK):
            bodies = [job_body(at) for at in mine[start : start + BULK]]
            post_jobs(api, tokens[users[index]], bodies)

    create_before(first_due, create, range(len(users)), threads=len(users))


def run_lateness(context, *, schedulers: int = 2, executors: int = 2) -> dict:
    seconds = 20 if context.quick else 60
    total = PEAK_RATE * seconds
    users = 10
    env = scenario_env(context, "lateness")
    with (
        served_api(context, env=env) as api,
        clean_slate((1.0,) * users) as user_ids,
        started_workers(context, env, schedulers=schedulers, executors=executors) as workers,
    ):
        _create_spread(api, user_ids, total)
        wait_for(
            lambda: not any_job("status IN ('scheduled', 'queued', 'running')"),
            timeout=seconds + 120,
            what="every job has run",
            workers=workers,
        )
        rows = on_every_shard(
            "SELECT extract(epoch FROM dispatched_at - due_at), "
            "extract(epoch FROM started_at - due_at), status FROM jobs"
        )
    dispatched = sorted(float(row[0]) for row in rows)
    started = sorted(float(row[1]) for row in rows)
    statuses = Counter(row[2] for row in rows)
    over_a_second = sum(1 for lateness in dispatched if lateness > 1.0)
    stats = {
        name: {f"p{q}_ms": _ms(percentile(values, q)) for q in (50, 90, 99)}
        | {"max_ms": _ms(values[-1]), "min_ms": _ms(values[0])}
        for name, values in (("dispatched_minus_due", dispatched), ("started_minus_due", started))
    }
    setup = describe_setup(
        schedulers=schedulers,
        executors=executors,
        extra=f"{total:,} jobs due uniformly at {PEAK_RATE}/s for {seconds} s, created through "
        "the API beforehand in requests of up to 1,000, default "
        f"settings (poll "
        f"{settings.SCHEDULER_POLL_INTERVAL * 1000:.0f} ms), {users} users",
    )
    lines = [
        "| measure | p50 ms | p90 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, row in stats.items():
        lines.append(
            f"| {name.replace('_', ' ')} | {row['p50_ms']} | {row['p90_ms']} | "
            f"{row['p99_ms']} | {row['max_ms']} |"
        )
    lines += [
        "",
        f"Setup: {setup}. Outcomes: {dict(statuses)}; dispatched more than 1 s late: "
        f"{over_a_second}. Targets: p99 dispatched minus due and p99 started minus due under "
        "100 ms.",
    ]
    return {
        "jobs": total,
        "rate_per_second": PEAK_RATE,
        "due_over_seconds": seconds,
        "statuses": dict(statuses),
        "dispatched_over_1s_late": over_a_second,
        **stats,
        # For the CDF plot (tools/bench/plots.py): 201 evenly spaced quantiles per series.
        "samples_ms": {
            "dispatched_minus_due": [_ms(percentile(dispatched, q / 2)) for q in range(201)],
            "started_minus_due": [_ms(percentile(started, q / 2)) for q in range(201)],
        },
        "setup": setup,
        "markdown": "\n".join(lines),
    }


# --- (d) fairness under contention ----------------------------------------------------


def run_fairness(context) -> dict:
    measure_seconds = 15 if context.quick else 45
    per_user = 150_000 if context.quick else 400_000
    env = scenario_env(context, "fairness")
    with clean_slate(FAIRNESS_WEIGHTS) as users:
        past = timezone.now() - timedelta(minutes=10)
        load_spread(users, per_user, lambda i: past + timedelta(microseconds=i))
        with started_workers(context, env, schedulers=1, executors=2) as workers:
            start = database_now()
            wait_for(
                lambda: (
                    (database_now() - start).total_seconds() >= measure_seconds + 2
                    or not any_job("status = 'scheduled'")
                ),
                timeout=measure_seconds + 60,
                what="the measuring period is over",
                workers=workers,
            )
            left = on_every_shard(
                "SELECT user_id, shard_id, count(*) FROM jobs WHERE status = 'scheduled' "
                "GROUP BY 1, 2"
            )
        statuses = Counter()
        for status, n in on_every_shard("SELECT status, count(*) FROM jobs GROUP BY 1"):
            statuses[status] += n
        dispatched = on_every_shard(
            "SELECT floor(extract(epoch FROM dispatched_at)), user_id, shard_id, count(*) "
            "FROM jobs WHERE dispatched_at IS NOT NULL GROUP BY 1, 2, 3"
        )
    weight_of = dict(zip(users, FAIRNESS_WEIGHTS, strict=True))
    backlog_left = {(user, shard): n for user, shard, n in left}
    windows = _contended_windows(dispatched, backlog_left)
    result = _fairness_numbers(windows, weight_of)
    result["backlog_left"] = {
        f"{weight_of[user]:g}": sum(n for (u, _), n in backlog_left.items() if u == user)
        for user in weight_of
    }
    result["measure_seconds"] = measure_seconds
    result["statuses_at_the_end"] = dict(statuses)
    result["setup"] = describe_setup(
        schedulers=1,
        executors=2,
        extra=f"weights {', '.join(f'{w:g}' for w in FAIRNESS_WEIGHTS)}, {per_user:,} "
        f"overdue jobs each spread over the shards, default batch size and in-flight cap "
        f"({settings.SCHEDULER_MAX_IN_FLIGHT_PER_SHARD}/shard)",
    )
    result["markdown"] = _fairness_markdown(result, weight_of)
    return result


def _contended_windows(dispatched, backlog_left) -> dict[int, Counter]:
    """Dispatches per user in each whole second while every user was backlogged everywhere.

    The first and last seconds are partial. Each shard shares its own slots, so once a user
    ran dry on one shard (no backlog left there) the later seconds no longer measure
    contention: they are dropped too.
    """
    windows: dict[int, Counter] = defaultdict(Counter)
    last_second: dict[tuple[int, int], int] = {}
    for second, user_id, shard_id, n in dispatched:
        windows[int(second)][user_id] += n
        key = (user_id, shard_id)
        last_second[key] = max(last_second.get(key, 0), int(second))
    seconds = sorted(windows)[1:-1]
    dry = [second for key, second in last_second.items() if not backlog_left.get(key)]
    if dry:
        seconds = [second for second in seconds if second < min(dry)]
    return {second: windows[second] for second in seconds}


def _fairness_numbers(windows: dict[int, Counter], weight_of: dict[int, float]) -> dict:
    total_weight = sum(weight_of.values())
    ideal = {user: weight / total_weight for user, weight in weight_of.items()}
    rows = []
    for index, counts in enumerate(windows.values()):
        n = sum(counts.values())
        share = {user: counts[user] / n for user in weight_of}
        rows.append(
            {
                "second": index,
                "dispatched": n,
                "shares": {f"{weight_of[u]:g}": round(s, 4) for u, s in share.items()},
                "max_deviation": round(max(abs(share[u] - ideal[u]) for u in weight_of), 4),
                # Jain's index of share / ideal share: 1.0 when every user gets its weight.
                "jain": round(jain_index([share[u] / ideal[u] for u in weight_of]), 5),
            }
        )
    overall = sum(windows.values(), Counter())
    total = sum(overall.values())
    return {
        "windows": rows,
        "dispatches": total,
        "ideal_shares": {f"{weight_of[u]:g}": round(s, 4) for u, s in ideal.items()},
        "overall_shares": {f"{weight_of[u]:g}": round(overall[u] / total, 4) for u in weight_of},
        "jain_mean": round(statistics.fmean(row["jain"] for row in rows), 5),
        "jain_min": min(row["jain"] for row in rows),
        "max_window_deviation": max(row["max_deviation"] for row in rows),
    }


def _fairness_markdown(result: dict, weight_of: dict[int, float]) -> str:
    rows = result["windows"]
    lines = [
        "| weight | ideal share | measured share | worst 1-s window deviation |",
        "|---:|---:|---:|---:|",
    ]
    for weight in (f"{w:g}" for w in weight_of.values()):
        worst = max(abs(row["shares"][weight] - result["ideal_shares"][weight]) for row in rows)
        lines.append(
            f"| {weight} | {result['ideal_shares'][weight]:.3f} | "
            f"{result['overall_shares'][weight]:.4f} | {worst:.4f} |"
        )
    lines += [
        "",
        f"{len(rows)} whole 1-second windows with every user backlogged on every shard, "
        f"{result['dispatches']:,} dispatches ({result['dispatches'] / len(rows):,.0f}/s). "
        f"Jain's fairness index of share/ideal per window: mean {result['jain_mean']:.4f}, "
        f"min {result['jain_min']:.4f}. Backlog left at the end, by weight: "
        f"{result['backlog_left']}; jobs by status: {result['statuses_at_the_end']}.",
        "",
        f"Setup: {result['setup']}.",
    ]
    return "\n".join(lines)
