"""docs/benchmarks.md from the results of a full ``make bench``.

    make bench                                   # writes bench-results/
    make bench ARGS='--only soak --out soak-results'
    python -m tools.bench.docs bench-results --add soak-results --out docs/benchmarks.md

Reads ``results.json`` (every number, and the machine) and ``report.md`` (the plots each
scenario drew) from the results directory, and writes one page: a table with a row per
promise (the scenario, what is promised, the figure measured, pass or fail), the peers
measured beside jobsvc, the plots (copied into ``docs/benchmarks/``), each scenario's
setup, the machine, the date and the command. Without ``--out`` the page goes to
stdout with the plots linked where they are. ``--template`` writes the page with every
figure ``TBD``, for a tree whose final run is still to come. ``--add`` takes the
scenarios a full run leaves out (the soak) from a run of their own; the page says when and
at which commit that run was.

A promise is judged here, from the numbers, so a page cannot claim a pass its run did not
show. A scenario the run did not include, or a result without the numbers a promise
reads, shows as ``TBD`` or ``n/a`` with no verdict.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tools.bench import machine_speed
from tools.bench.report import REPORT_FILE, RESULTS_FILE
from tools.bench.soak_numbers import p99_follows_busy_cores

PLOTS_DIR = "benchmarks"  # beside the page: docs/benchmarks/
GENERATED_BY = "python -m tools.bench.docs RESULTS_DIR --out docs/benchmarks.md"


class Missing(Exception):
    """A result lacks a number a promise reads."""


@dataclass(frozen=True)
class Verdict:
    figure: str
    passed: bool | None  # None: no verdict (not run, or nothing to judge)


@dataclass(frozen=True)
class Promise:
    scenario: str  # the key in results.json (tools/bench/scenarios.py)
    what: str  # what the scenario does, in a few words
    promise: str  # what must hold
    judge: Callable[[dict], Verdict]


def _get(result: dict, *path: str | int):
    value = result
    for key in path:
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            raise Missing(".".join(str(p) for p in path)) from None
    if value is None:
        raise Missing(".".join(str(p) for p in path))
    return value


def _api_row(result: dict, prefix: str) -> dict:
    for row in _get(result, "results"):
        if str(row.get("scenario", "")).startswith(prefix):
            return row
    raise Missing(f"results[{prefix}]")


def _api_single(result: dict) -> Verdict:
    row = _api_row(result, "single")
    rate, p99 = _get(row, "requests_per_second"), _get(row, "latency_ms_p99")
    return Verdict(f"{rate:,.0f} requests/s, p99 {p99:.1f} ms", rate >= 1000 and p99 < 50)


def _api_bulk(result: dict) -> Verdict:
    row = _api_row(result, "bulk")
    rate, p99 = _get(row, "jobs_per_second"), _get(row, "latency_ms_p99")
    return Verdict(f"{rate:,.0f} jobs/s, p99 {p99:.0f} ms a request", rate >= 20_000)


def _at_least(key: str, floor: float, unit: str) -> Callable[[dict], Verdict]:
    def judge(result: dict) -> Verdict:
        value = _get(result, key)
        return Verdict(f"{value:,.0f} {unit}", value >= floor)

    return judge


def _round_ratio(result: dict) -> Verdict:
    ratio = _get(result, "round_ratio_large_to_small")
    return Verdict(f"{ratio:.2f}x", ratio <= 1.5)


# 5 % of what a webhook job costs the stack in the webhook drain (`fairness_webhooks`:
# about 2,000 µs of CPU per job on the 2-core machine).
HISTORY_BUDGET_US = 100.0


def _history_cost(result: dict) -> Verdict:
    extra = _get(result, "extra_us_per_job")
    share = _get(result, "extra_share")
    figure = f"+{extra:.1f} µs per job (+{100 * share:.0f} % of the claim and record)"
    return Verdict(figure, extra <= HISTORY_BUDGET_US)


def _lateness(result: dict) -> Verdict:
    p50 = _get(result, "started_minus_due", "p50_ms")
    p99 = _get(result, "started_minus_due", "p99_ms")
    return Verdict(f"started - due p50 {p50:.1f}, p99 {p99:.1f} ms", p99 <= 100)


def _dispatched_shares(result: dict) -> Verdict:
    ideal = _get(result, "ideal_shares")
    windows = _get(result, "windows")
    worst = max(
        abs(share - ideal[user]) / ideal[user]
        for window in windows
        for user, share in _get(window, "shares").items()
    )
    return Verdict(f"worst window {worst:.1%} off; {len(windows)} windows", worst <= 0.05)


def _started_shares(result: dict) -> Verdict:
    worst = _get(result, "worst_window_relative_deviation")
    jain = _get(result, "jain_min")
    run_out = _get(result, "last_second_relative_deviation")
    rate = _get(result, "jobs_per_second")
    return Verdict(
        f"worst window {worst:.1%} off, Jain min {jain}; the run-out second {run_out:.0%} off;"
        f" {rate:,.0f} jobs/s",
        worst <= 0.05 and jain >= 0.99 and run_out <= 0.15,
    )


def _class_shares(result: dict) -> Verdict:
    classes = _get(result, "classes")
    worst = max(_get(row, "worst_window_relative_deviation") for row in classes.values())
    gap = _get(result, "longest_gap_seconds")
    return Verdict(
        f"worst window {worst:.1%} off; longest gap {gap:.2f} s", worst <= 0.05 and gap <= 2
    )


def _thousand_users(result: dict) -> Verdict:
    everyone = _get(result, "all_users_started_after_seconds")
    spread = _get(result, "started_in_window_max_over_min")
    return Verdict(
        f"all started after {everyone:.2f} s; max/min started {spread:.3f}",
        everyone <= 5 and spread <= 1.10,
    )


def _retries(result: dict) -> Verdict:
    worst = _get(result, "a_share_max")
    mean = _get(result, "a_share_mean")
    return Verdict(f"failing user's share {mean:.3f} (best window {worst:.3f})", worst <= 0.5)


def _wait(*path: str) -> Callable[[dict], Verdict]:
    def judge(result: dict) -> Verdict:
        p50, p99 = _get(result, *path, "p50"), _get(result, *path, "p99")
        return Verdict(f"p50 {p50:.0f}, p99 {p99:.0f} ms", p99 <= 250)

    return judge


def _end_to_end(result: dict) -> Verdict:
    best = max(_get(result, "results"), key=lambda row: _get(row, "jobs_per_second"))
    rate = _get(best, "jobs_per_second")
    where = f"{_get(best, 'schedulers')} scheduler(s), {_get(best, 'executors')} executors"
    return Verdict(f"{rate:,.0f} jobs/s ({where})", rate >= 10_000)


def _failover(result: dict) -> Verdict:
    lost = _get(result, "jobs_lost")
    twice = _get(result, "duplicate_executions_of_an_attempt")
    back = result.get("throughput_recovered_after_seconds")  # None: not within the run
    recovered = f"back after {back} s" if back is not None else "not back while jobs came due"
    figure = f"{lost} lost, {twice} run twice; throughput {recovered}"
    return Verdict(figure, not lost and not twice)


def _soak(result: dict) -> Verdict:
    """The soak's own checks (tools/bench/soak.py), with the figures they judged."""
    checks = _get(result, "checks")
    lateness, grown = _get(checks, "lateness"), _get(checks, "memory_growth")
    p99s = [_get(minute, "p99_ms") for minute in _get(result, "per_minute", "started_minus_due_ms")]
    short = _get(checks, "rate_held").get("minutes_short") or []
    parts = []
    if short:
        parts.append(
            "rate short in every minute"
            if len(short) == len(p99s)
            else f"rate short in minutes {short}"
        )
    parts.append(f"p99 {min(p99s):,.0f}-{max(p99s):,.0f} ms a minute")
    crept = lateness.get("minutes_crept") or []
    if crept:
        parts[-1] += (
            f", {len(crept)} minute{'s' if len(crept) > 1 else ''} over "
            f"{_get(lateness, 'creep_limit')}x minute 2's "
            f"{_get(lateness, 'minute_2_p99_ms')} ms"
        )
        follows = p99_follows_busy_cores(result)
        if follows is not None:
            parts[-1] += f" (r = {follows:.2f} with the machine's busy cores)"
        late = result.get("late_jobs")
        if late and late["late"]:
            parts[-1] += (
                f", {late['in_worst_seconds']:.0%} of the jobs over that due in the worst "
                f"{late['worst_seconds']} of {late['seconds']:,} seconds"
            )
    if grown.get("grown"):
        parts.append(f"memory grew: {', '.join(grown['grown'])}")
    peaks = _get(checks, "worker_rss", "peaks_mib").values()
    ran = _get(checks, "every_job_ran")
    parts.append(f"workers ≤ {max(peaks):,.0f} MiB")
    parts.append(f"{_get(ran, 'succeeded'):,} of {_get(ran, 'created'):,} jobs ran")
    if ran.get("early"):
        parts[-1] += f", {ran['early']:,} early"
    return Verdict("; ".join(parts), bool(_get(result, "passed")))


WAIT = "started within 250 ms of due, p99"
PROMISES: tuple[Promise, ...] = (
    Promise(
        "api_create",
        "API, single creates (16 connections)",
        "≥ 1,000 requests/s, p99 < 50 ms",
        _api_single,
    ),
    Promise("api_create", "API, bulk creates (1,000 jobs a request)", "≥ 20,000 jobs/s", _api_bulk),
    Promise(
        "dispatch_throughput",
        "Dispatch from a 1,000,000-job backlog, one scheduler",
        "≥ 20,000 jobs/s",
        _at_least("jobs_per_second", 20_000, "jobs/s"),
    ),
    Promise(
        "dispatch_batch_selection",
        "A dispatch round beside 1,000,000 jobs",
        "≤ 1.5x the round beside 10,000",
        _round_ratio,
    ),
    Promise(
        "dispatch_lateness",
        "Jobs due at the design peak (1,389/s for 60 s)",
        "started - due p99 ≤ 100 ms",
        _lateness,
    ),
    Promise(
        "dispatch_fairness",
        "Dispatched shares, weights 1:2:4",
        "each user within 5 % of its share in every 1-s window",
        _dispatched_shares,
    ),
    Promise(
        "fairness_end_to_end",
        "Started shares, weights 1:2:4, bulk creates",
        "each user within 5 % of its share per 1-s window, Jain ≥ 0.99; the second before"
        " the heaviest user's last start within 15 %",
        _started_shares,
    ),
    Promise("fairness_single_creates", "The same, one job a request", "as above", _started_shares),
    Promise("fairness_webhooks", "The same, webhook jobs", "as above", _started_shares),
    Promise(
        "fairness_many_users",
        "100 users of weights 1, 2, 5, 10",
        "each class within 5 % per window; no user 2 s without a start",
        _class_shares,
    ),
    Promise(
        "fairness_thousand_users",
        "1,000 users of one weight",
        "every user started within 5 s; started jobs per user within 10 %",
        _thousand_users,
    ),
    Promise(
        "fairness_with_retries",
        "A user whose jobs all fail and retry, beside another",
        "its retries get no more than its share (0.5)",
        _retries,
    ),
    Promise(
        "light_user_wait", "A light user's job during a 100,000-job flood", WAIT, _wait("wait_ms")
    ),
    Promise("light_user_wait_webhooks", "The same with webhooks", WAIT, _wait("wait_ms")),
    Promise("light_user_due_now", "The same, created at its due time", WAIT, _wait("wait_ms")),
    Promise(
        "priority_in_own_backlog",
        "An urgent job behind its own user's backlog",
        WAIT,
        _wait("wait_ms"),
    ),
    Promise(
        "steady_beside_flood",
        "A design-peak stream beside a 100,000-job flood",
        WAIT,
        _wait("their_wait_ms"),
    ),
    Promise("end_to_end", "End to end, 500,000 no-op jobs", "≥ 10,000 jobs/s", _end_to_end),
    Promise(
        "attempt_history",
        "Writing the attempt history, webhook jobs (no-op jobs write none)",
        "≤ 100 µs per job: 5 % of a webhook job's CPU in `fairness_webhooks`",
        _history_cost,
    ),
    Promise(
        "failover",
        "SIGKILL a scheduler and an executor at 300 jobs/s",
        "no job lost, no attempt run twice",
        _failover,
    ),
    Promise(
        "soak",
        "A soak at the design peak (30 minutes, run on its own)",
        "1,389 jobs/s held; lateness p99 ≤ 100 ms every minute, none over 1.5x minute 2's; "
        "no memory growth; workers ≤ 150 MiB; every job ran",
        _soak,
    ),
)


def _verdict(promise: Promise, results: dict) -> Verdict:
    if promise.scenario not in results:
        return Verdict("TBD", None)
    try:
        return promise.judge(results[promise.scenario])
    except Missing as missing:
        return Verdict(f"n/a (no {missing} in the result)", None)


def _mark(passed: bool | None) -> str:
    return {True: "pass", False: "**fail**", None: "—"}[passed]


def table(results: dict) -> str:
    lines = ["| scenario | promise | measured | |", "|---|---|---|---|"]
    for promise in PROMISES:
        verdict = _verdict(promise, results)
        lines.append(
            f"| {promise.what} (`{promise.scenario}`) | {promise.promise} | "
            f"{verdict.figure} | {_mark(verdict.passed)} |"
        )
    return "\n".join(lines)


# --- peers -----------------------------------------------------------------------------
# PEERS: the `peers` scenario (tools/bench/peers.py) measures jobsvc and other job queues
# on the same machine and stack. Its result, as read here:
#   {"systems": {"jobsvc": {"version": "...", "drain_jobs_per_second": 0.0,
#                           "lateness_ms": {"p50": 0.0, "p99": 0.0}}, "pgqueuer": {...},
#                "celery": {...}},
#    "setup": "..."}
# Change this reader if the scenario's result takes another shape.
PEER_NAMES = ("jobsvc", "pgqueuer", "celery")


def peers(results: dict) -> str:
    result = results.get("peers")
    lines = [
        "| system | drain: jobs/s, first start to last | lateness at 1,389 jobs/s: p50 | p99 |",
        "|---|---:|---:|---:|",
    ]
    systems = (result or {}).get("systems") or {}
    for name in dict.fromkeys([*PEER_NAMES, *systems]):
        row = systems.get(name)
        if row is None:
            lines.append(f"| {name} | TBD | TBD | TBD |")
            continue
        version = f" {row['version']}" if row.get("version") else ""
        lateness = row.get("lateness_ms") or {}
        lines.append(
            f"| {name}{version} | {_number(row.get('drain_jobs_per_second'))} | "
            f"{_number(lateness.get('p50'), ' ms')} | {_number(lateness.get('p99'), ' ms')} |"
        )
    if result and result.get("setup"):
        lines += ["", f"Setup: {result['setup']}."]
    return "\n".join(lines)


def _number(value, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:,.0f}{unit}"


# --- plots and the page ----------------------------------------------------------------

IMAGE = re.compile(r"^!\[(?P<title>[^\]]*)\]\((?P<file>[^)]+)\)\s*$")


def report_plots(report: str) -> list[tuple[str, str, str]]:
    """(scenario, title, file) of every plot report.md shows, in its order."""
    plots, scenario = [], ""
    for line in report.splitlines():
        if line.startswith("## "):
            scenario = line[3:].strip()
        elif match := IMAGE.match(line):
            plots.append((scenario, match["title"], match["file"]))
    return plots


def _at_commit(machine: dict) -> str:
    commit = machine.get("commit")
    return f" at commit {commit}" if commit else ""


def machine_line(machine: dict | None) -> str:
    if not machine:
        return "Measured on: TBD (the machine, the date and the kind of run)."
    return (
        f"Measured on {machine.get('date', '?')}{_at_commit(machine)}, a "
        f"{machine.get('mode', '?')} run, on "
        f"{machine.get('cores', '?')} cores ({machine.get('platform', '?')}, Python "
        f"{machine.get('python', '?')}), with the whole stack and the benchmark on that "
        f"one machine{machine_speed.described(machine)}."
    )


def added_runs_line(added: list[tuple[list[str], dict]]) -> str:
    """Where the scenarios taken from other runs (``--add``) were measured."""
    return "".join(
        f" {', '.join(f'`{name}`' for name in names)}: a run of its own (`make bench "
        f"ARGS='--only {' '.join(names)}'`, then `--add` here) on "
        f"{machine.get('date', '?')}{_at_commit(machine)}{machine_speed.described(machine)}."
        for names, machine in added
    )


def page(
    results: dict,
    plots: list[tuple[str, str, str]],
    added: list[tuple[list[str], dict]] | None = None,
) -> str:
    """``added``: the scenarios taken from other runs, with those runs' machines."""
    machine = results.get("machine")
    command = (
        "make bench"
        if (machine or {}).get("mode", "full") == "full"
        else ("make bench ARGS=--quick")
    )
    parts = [
        "# Benchmarks",
        f"<!-- Generated by `{GENERATED_BY}` from a `make bench` results directory: edit "
        "tools/bench/docs.py, not this page. -->",
        machine_line(machine)
        + added_runs_line(added or [])
        + f" Command: `{command}` (results in `bench-results/`), then `{GENERATED_BY}`."
        " `make bench ARGS='--only NAME'` runs one scenario; each starts the processes it"
        " needs on a throwaway stack.",
        table(results),
        "## Beside other job queues",
        "The same two measurements on the same machine and stack: draining 100,000 no-op"
        " jobs due at once, and lateness while jobs come due at the design peak.",
        peers(results),
    ]
    if plots:
        parts.append("## Plots")
        parts += [f"![{title}]({file})" for _, title, file in plots]
    setups = [
        f"- `{name}`: {result['setup'].rstrip('.')}."
        for name, result in results.items()
        if isinstance(result, dict) and isinstance(result.get("setup"), str)
    ]
    if setups:
        parts += ["## Setups", "\n".join(setups)]
    return "\n\n".join(parts) + "\n"


def render(results_dir: Path | None, out: Path | None, add: Sequence[Path] = ()) -> str:
    """The page for a results directory (None: the template), with the scenarios it lacks
    from the directories in ``add``; plots copied beside ``out``."""
    if results_dir is None:
        return page({}, [])
    results, plots = _read_run(results_dir)
    added: list[tuple[list[str], dict]] = []
    for directory in add:
        more, more_plots = _read_run(directory)
        names = [name for name in more if name != "machine" and name not in results]
        results |= {name: more[name] for name in names}
        plots += [plot for plot in more_plots if plot[0] in names]
        if names:
            added.append((names, more.get("machine") or {}))
    if out is None:
        return page(results, [(s, t, str(f)) for s, t, f in plots], added)
    target = out.parent / PLOTS_DIR
    if plots:
        target.mkdir(parents=True, exist_ok=True)
    for _, _, file in plots:
        shutil.copyfile(file, target / file.name)
    return page(results, [(s, t, f"{PLOTS_DIR}/{f.name}") for s, t, f in plots], added)


def _read_run(directory: Path) -> tuple[dict, list[tuple[str, str, Path]]]:
    """A run's results, and its plots (scenario, title, path) that exist."""
    results = json.loads((directory / RESULTS_FILE).read_text())
    report = directory / REPORT_FILE
    plots = report_plots(report.read_text()) if report.exists() else []
    return results, [(s, t, directory / f) for s, t, f in plots if (directory / f).exists()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.docs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("results_dir", type=Path, nargs="?", help="a `make bench` output")
    parser.add_argument("--out", type=Path, help="write the page here (plots beside it)")
    parser.add_argument("--template", action="store_true", help="every figure TBD")
    parser.add_argument(
        "--add",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="another run's results: the scenarios the first lacks (the soak)",
    )
    args = parser.parse_args(argv)
    if args.template == (args.results_dir is not None):
        parser.error("give a results directory, or --template")
    text = render(None if args.template else args.results_dir, args.out, args.add)
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
