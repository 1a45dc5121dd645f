"""Fair share at scale, and with retries: when users' jobs (and attempts) *start*.

The same measurement as ``tools/bench/fairness.py`` (jobs in through the API, each job's
``started_at`` out, every shard, 2 schedulers, 2 executors), for many users and for a user
whose jobs fail and come back:

- ``fairness_many_users``: 100 users, 25 each of weights 1, 2, 5 and 10, each create N
  no-op jobs (2,000; quick: 600) due at one instant. Over the whole 1-s windows in which
  every user still had jobs to start: each weight class's share of the started jobs
  against its weighted share (worst window, absolute and relative), Jain's index over the
  classes per window, and the longest time any user went without a start while it had
  jobs waiting (targets: classes within 5% per window; no backlogged user 2 s without).
- ``fairness_thousand_users``: 1,000 weight-1 users with 200 jobs each (quick: 300 x 100),
  one bulk request per user, due at one instant. The time from the first start until every
  user had one (target: 5 s), how many had one within 5 s, and the spread of started jobs
  per user from then until the first user ran out (max/min, coefficient of variation;
  target: within 10%).
- ``fairness_with_retries``: two weight-1 users backlogged at once; A's 6,000 jobs (quick:
  2,000) all fail (the http handler against a closed loopback port: connection refused)
  and are retried up to 3 attempts with a short backoff, B's 60,000 no-op jobs (quick:
  20,000; the no-op handler runs far faster, so B needs many more) succeed. An attempt
  is the unit of service: A's attempts (the failed ones' ``attempt_errors[*].at``, the
  last one's ``started_at``) against B's starts, per 1-s window while both had some left
  (target: A no more than its weight share, 0.5, within 5%). A failed attempt's start is
  not stored (started_at is the last attempt's), so it counts when its failure was
  recorded.

    make bench ARGS="--only fairness_many_users fairness_thousand_users fairness_with_retries"
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from itertools import zip_longest

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
    _ms,
    _started,
    add_cpu,
    drain_cpu,
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
    coefficient_of_variation,
    jain_index,
    longest_gap,
    per_second,
    percentile,
    shares,
    weighted_shares,
)
from tools.devstack.ports import free_port
from tools.webhook_receiver import LOOPBACK_WEBHOOKS

CLASS_WEIGHTS = (1.0, 2.0, 5.0, 10.0)
USERS_PER_CLASS = 25
CREATE_THREADS = 8  # concurrent create requests in all: gunicorn runs 4 sync workers
FIRST_START_TARGET = 5.0  # seconds from the first start until every user had one
RETRY_MAX_ATTEMPTS = 3
# A short backoff, so the failing user's retries come back while both users are backlogged.
RETRY_ENV = {
    "JOBSVC_RETRY_BASE_DELAY_SECONDS": "0.2",
    "JOBSVC_RETRY_MAX_DELAY_SECONDS": "1",
    **LOOPBACK_WEBHOOKS,
}


def run_fairness_many_users(context) -> dict:
    per_user = 600 if context.quick else 2_000
    weights = [w for w in CLASS_WEIGHTS for _ in range(USERS_PER_CLASS)]
    env = scenario_env(context, "fair-many")
    with served_api(context, env=env) as api, clean_slate(weights) as users:
        with started_workers(context, env, schedulers=2, executors=2) as workers:
            due = _create_pooled(api, dict.fromkeys(users, per_user))
            cpu_used = drain_cpu(due, len(users) * per_user, workers)
        starts = _started(users)
        if context.job_times:
            save_job_times(context.out, "fairness_many_users", users)
    weight_of = dict(zip(users, weights, strict=True))
    result = _class_shares(starts, weight_of)
    result["late_ms_p99"] = _ms(
        percentile(sorted(t - due for times in starts.values() for t in times), 99)
    )
    result["setup"] = describe_setup(
        schedulers=2,
        executors=2,
        extra=f"{USERS_PER_CLASS} users each of weights 1, 2, 5, 10; {per_user:,} no-op jobs "
        f"each, created through the API in requests of up to {BULK:,} ({CREATE_THREADS} at "
        "a time), all due at one instant",
    )
    result["markdown"] = _class_markdown(result)
    add_cpu(result, cpu_used, jobs=len(users) * per_user)
    return result


def run_fairness_thousand_users(context) -> dict:
    n_users, per_user = (300, 100) if context.quick else (1_000, 200)
    env = scenario_env(context, "fair-thousand")
    with served_api(context, env=env) as api, clean_slate([1.0] * n_users) as users:
        with started_workers(context, env, schedulers=2, executors=2) as workers:
            due = _create_pooled(api, dict.fromkeys(users, per_user))
            cpu_used = drain_cpu(due, n_users * per_user, workers)
        starts = _started(users)
        if context.job_times:
            save_job_times(context.out, "fairness_thousand_users", users)
    result = _first_starts_and_spread(starts)
    result["users"], result["jobs_per_user"] = n_users, per_user
    result["setup"] = describe_setup(
        schedulers=2,
        executors=2,
        extra=f"{n_users:,} weight-1 users with {per_user:,} no-op jobs each, one API request "
        f"per user ({CREATE_THREADS} at a time), all due at one instant",
    )
    result["markdown"] = _thousand_markdown(result)
    add_cpu(result, cpu_used, jobs=n_users * per_user)
    return result


def run_fairness_with_retries(context) -> dict:
    failing, succeeding = (2_000, 20_000) if context.quick else (6_000, 60_000)
    closed = f"http://127.0.0.1:{free_port()}/"  # nothing listens: connection refused
    env = scenario_env(context, "fair-retries", **RETRY_ENV)
    with served_api(context, env=env) as api, clean_slate((1.0, 1.0)) as (a, b):
        with started_workers(context, env, schedulers=2, executors=2) as workers:
            extra = {
                a: {"handler": "http", "handler_params": {"url": closed}},
                b: {},
            }
            for body in extra.values():
                body["max_attempts"] = RETRY_MAX_ATTEMPTS
            _create_pooled(api, {a: failing, b: succeeding}, extra=extra)
            _wait_until_ended(failing + succeeding, workers)
        attempts = _attempt_times([a, b])
        outcomes = _outcomes([a, b])
    result = _retry_shares(attempts, a=a, b=b)
    result["outcomes"] = {"A": outcomes.get(a, {}), "B": outcomes.get(b, {})}
    result["setup"] = describe_setup(
        schedulers=2,
        executors=2,
        extra=f"two weight-1 users; A: {failing:,} jobs of the http handler against a closed "
        f"loopback port (every attempt refused), B: {succeeding:,} no-op jobs; max_attempts "
        f"{RETRY_MAX_ATTEMPTS}, retry backoff base 0.2 s, cap 1 s; all due at one instant",
    )
    result["markdown"] = _retry_markdown(result)
    return result


# --- the stack -------------------------------------------------------------------------


def _create_pooled(
    api: str, jobs_per_user: dict[int, int], *, extra: dict[int, dict] | None = None
) -> float:
    """Every user's jobs in bulk requests, CREATE_THREADS at a time, users taking turns;
    return when the jobs are due (after every request is done)."""
    tokens = tokens_for(jobs_per_user)
    due = time.time() + CREATE_LEAD + sum(jobs_per_user.values()) / CREATE_RATE_FLOOR
    per_user = [
        [(user, min(BULK, count - start)) for start in range(0, count, BULK)]
        for user, count in jobs_per_user.items()
    ]
    requests = [r for turn in zip_longest(*per_user) for r in turn if r is not None]

    def create(request: tuple[int, int]) -> None:
        user, count = request
        body = {**job_body(due), **(extra or {}).get(user, {})}
        post_jobs(api, tokens[user], [body] * count)

    create_before(due, create, requests, threads=CREATE_THREADS)
    return due


def _wait_until_ended(total: int, workers) -> None:
    def ended() -> bool:
        rows = on_every_shard("SELECT count(*) FROM jobs WHERE status IN ('succeeded', 'failed')")
        return sum(n for (n,) in rows) >= total

    wait_for(ended, timeout=300, what=f"all {total:,} jobs succeeded or failed", workers=workers)


def _attempt_times(users: list[int]) -> dict[int, list[float]]:
    """When each attempt ran: the last one's started_at, the earlier ones' failure time."""
    rows = on_every_shard(
        "SELECT j.user_id, extract(epoch FROM (e->>'at')::timestamptz)::float8"
        "  FROM jobs j, jsonb_array_elements(j.attempt_errors) e"
        " WHERE j.user_id = ANY(%(users)s) AND (e->>'attempt')::int <> j.attempts"
        " UNION ALL"
        " SELECT user_id, extract(epoch FROM started_at)::float8 FROM jobs"
        " WHERE user_id = ANY(%(users)s) AND started_at IS NOT NULL",
        {"users": users},
    )
    times: dict[int, list[float]] = {user: [] for user in users}
    for user, at in rows:
        times[user].append(at)
    return times


def _outcomes(users: list[int]) -> dict[int, dict[str, int]]:
    rows = on_every_shard(
        "SELECT user_id, status, attempts, count(*) FROM jobs WHERE user_id = ANY(%(users)s)"
        " GROUP BY 1, 2, 3",
        {"users": users},
    )
    found: dict[int, Counter] = {}
    for user, status, attempts, n in rows:
        found.setdefault(user, Counter())[f"{status}, {attempts} attempts"] += n
    return {user: dict(sorted(counts.items())) for user, counts in found.items()}


# --- numbers ---------------------------------------------------------------------------


def _class_shares(starts: dict[int, list[float]], weight_of: dict[int, float]) -> dict:
    """Per weight class: share of started jobs per backlogged window against its weight."""
    label = {user: f"{weight:g}" for user, weight in weight_of.items()}
    classes = sorted(set(label.values()), key=float)
    ideal = weighted_shares(_class_weight(label))
    windows = []
    for second, counts in enumerate(backlogged_windows(starts)):
        by_class = Counter()
        for user, n in counts.items():
            by_class[label[user]] += n
        share = shares(by_class, classes)
        windows.append(
            {
                "second": second,
                "started": sum(by_class.values()),
                "shares": {c: round(share[c], 4) for c in classes},
                "jain": round(jain_index([share[c] / ideal[c] for c in classes]), 5),
            }
        )
    first = min(min(times) for times in starts.values())
    gaps = {user: longest_gap(times, since=first) for user, times in starts.items()}
    worst_user = max(gaps, key=gaps.get)
    drain = max(max(times) for times in starts.values()) - first
    started_per_second = per_second(starts, since=first)
    return {
        "windows": windows,
        "ideal_shares": {c: round(ideal[c], 4) for c in classes},
        "contended_seconds": len(windows),
        "classes": {c: _class_deviation(c, ideal[c], windows) for c in classes},
        "jain_min": min((w["jain"] for w in windows), default=None),
        "jain_mean": round(statistics.fmean(w["jain"] for w in windows), 5) if windows else None,
        "longest_gap_seconds": round(gaps[worst_user], 3),
        "longest_gap_weight": label[worst_user],
        "users_with_a_gap_over_2s": sum(1 for gap in gaps.values() if gap > 2.0),
        "started_per_second": {
            c: [
                sum(n for u, n in started_per_second[s].items() if label[u] == c)
                for s in range(int(drain) + 1)
            ]
            for c in classes
        },
        "jobs_per_second": round(sum(len(t) for t in starts.values()) / drain, 1),
    }


def _class_weight(label: dict[int, str]) -> Counter:
    weights = Counter()
    for weight in label.values():
        weights[weight] += float(weight)
    return weights


def _class_deviation(c: str, ideal: float, windows: list[dict]) -> dict:
    deviations = [abs(w["shares"][c] - ideal) for w in windows]
    worst = max(deviations, default=None)
    return {
        "weighted_share": round(ideal, 4),
        "mean_share": round(statistics.fmean(w["shares"][c] for w in windows), 4)
        if windows
        else None,
        "worst_window_absolute_deviation": None if worst is None else round(worst, 4),
        "worst_window_relative_deviation": None if worst is None else round(worst / ideal, 4),
    }


def _first_starts_and_spread(starts: dict[int, list[float]]) -> dict:
    """When every user had a start, and started jobs per user until the first ran out."""
    first = min(min(times) for times in starts.values())
    firsts = sorted(min(times) - first for times in starts.values())
    everyone_at = first + firsts[-1]
    first_out = min(max(times) for times in starts.values())
    window = first_out - everyone_at
    result = {
        "all_users_started_after_seconds": round(firsts[-1], 3),
        "users_started_within_5s": sum(1 for t in firsts if t <= FIRST_START_TARGET),
        "first_start_seconds_p50": round(percentile(firsts, 50), 3),
        "spread_window_seconds": round(window, 3),
        "longest_gap_seconds": round(
            max(longest_gap(times, since=first) for times in starts.values()), 3
        ),
    }
    if window > 0:
        counts = [
            sum(1 for t in times if everyone_at <= t < first_out) for times in starts.values()
        ]
        result |= {
            "started_in_window_min": min(counts),
            "started_in_window_max": max(counts),
            "started_in_window_max_over_min": round(max(counts) / min(counts), 3)
            if min(counts)
            else None,
            "started_in_window_cv": round(coefficient_of_variation(counts), 4),
        }
    drain = max(max(times) for times in starts.values()) - first
    seconds = per_second(starts, since=first)
    result["started_per_second"] = {
        q: [percentile(sorted(seconds[s][u] for u in starts), p) for s in range(int(drain) + 1)]
        for q, p in (("min", 0), ("median", 50), ("max", 100))
    }
    return result


def _retry_shares(attempts: dict[int, list[float]], *, a: int, b: int) -> dict:
    windows = []
    for second, counts in enumerate(backlogged_windows(attempts)):
        share = shares(counts, [a, b])
        windows.append({"second": second, "attempts": counts[a] + counts[b], "a_share": share[a]})
    a_shares = [w["a_share"] for w in windows]
    worst = max(a_shares, default=None)
    first = min(min(times) for times in attempts.values() if times)
    last = max(max(times) for times in attempts.values() if times)
    seconds = per_second(attempts, since=first)
    return {
        "windows": [{**w, "a_share": round(w["a_share"], 4)} for w in windows],
        "attempts": {"A": len(attempts[a]), "B": len(attempts[b])},
        "contended_seconds": len(windows),
        "a_share_mean": round(statistics.fmean(a_shares), 4) if windows else None,
        "a_share_max": None if worst is None else round(worst, 4),
        "a_share_max_over_weight_share": None if worst is None else round(worst / 0.5 - 1, 4),
        "b_longest_gap_seconds": round(longest_gap(attempts[b], since=first), 3),
        "attempts_per_second": {
            name: [seconds[s][user] for s in range(int(last - first) + 1)]
            for name, user in (("A (failing, retried)", a), ("B (succeeding)", b))
        },
    }


# --- reports ---------------------------------------------------------------------------


def _class_markdown(result: dict) -> str:
    lines = [
        "| weight | users | weighted share | mean share (contended) | worst window: abs | rel |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for c, row in result["classes"].items():
        lines.append(
            f"| {c} | {USERS_PER_CLASS} | {row['weighted_share']:.3f} | "
            f"{_num(row['mean_share'], '.3f')} | "
            f"{_num(row['worst_window_absolute_deviation'], '.3f')} | "
            f"{_num(row['worst_window_relative_deviation'], '.1%')} |"
        )
    lines += [
        "",
        f"{result['contended_seconds']} whole 1-s windows with every user still waiting; "
        f"Jain's index over the classes (share/weighted share): min {result['jain_min']}, "
        f"mean {result['jain_mean']}. Longest time a user with jobs waiting went without a "
        f"start: {result['longest_gap_seconds']} s (a weight-{result['longest_gap_weight']} "
        f"user; {result['users_with_a_gap_over_2s']} users over 2 s). Whole run "
        f"{result['jobs_per_second']:,.0f} started jobs/s; started minus due p99 "
        f"{result['late_ms_p99']} ms.",
        "",
        f"Setup: {result['setup']}.",
    ]
    return "\n".join(lines)


def _thousand_markdown(result: dict) -> str:
    return "\n".join(
        [
            "| users | every user had a start after | users with a start within 5 s | "
            "started per user while all backlogged: min / max | max/min | CV |",
            "|---:|---:|---:|---:|---:|---:|",
            f"| {result['users']:,} | {result['all_users_started_after_seconds']} s | "
            f"{result['users_started_within_5s']:,} | "
            f"{result.get('started_in_window_min', '-')} / "
            f"{result.get('started_in_window_max', '-')} | "
            f"{_num(result.get('started_in_window_max_over_min'), '.3f')} | "
            f"{_num(result.get('started_in_window_cv'), '.1%')} |",
            "",
            f"Spread measured over {result['spread_window_seconds']} s, from the moment every "
            f"user had a start until the first user ran out. Median user's first start "
            f"{result['first_start_seconds_p50']} s after the first start of all; longest "
            f"time any user went without a start while it had jobs waiting: "
            f"{result['longest_gap_seconds']} s.",
            "",
            f"Setup: {result['setup']}.",
        ]
    )


def _retry_markdown(result: dict) -> str:
    return "\n".join(
        [
            "| user | attempts | share of attempts (contended, mean) | worst window |",
            "|---|---:|---:|---:|",
            f"| A (fails, retried) | {result['attempts']['A']:,} | "
            f"{_num(result['a_share_mean'], '.3f')} | {_num(result['a_share_max'], '.3f')} "
            f"(max; {_num(result['a_share_max_over_weight_share'], '+.1%')} over 0.5) |",
            f"| B (succeeds) | {result['attempts']['B']:,} | "
            f"{_num(None if result['a_share_mean'] is None else 1 - result['a_share_mean'], '.3f')}"
            f" | |",
            "",
            f"{result['contended_seconds']} whole 1-s windows with both users' attempts still "
            f"to come (A is not always due in them: its retries wait out the backoff; a "
            f"failed attempt counts when its failure was recorded, the only time stored). "
            f"Longest B went without a start: {result['b_longest_gap_seconds']} s. Outcomes: "
            f"A {result['outcomes']['A']}, B {result['outcomes']['B']}.",
            "",
            f"Setup: {result['setup']}.",
        ]
    )


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)
