"""The soak's result from what its run collected (``tools.bench.soak``): per-minute
numbers, the checks (``soak_numbers``) and the report's table and text."""

from __future__ import annotations

from dataclasses import dataclass, field

from tools.bench import memory, soak_numbers
from tools.bench.scenario_stack import PEAK_RATE
from tools.bench.stack_cpu import StackCpu

# The jobs tables as sampled (Sample.tables), summed over the shards.
TABLE_FIELDS = ("total_mib", "heap_mib", "indexes_mib", "live_tuples", "dead_tuples", "vacuums")


@dataclass(frozen=True)
class Sample:
    at: float  # Unix time
    memory: dict[str, dict[str, float]]  # role -> rss, pss, pss_anon, ... in MiB
    tables: dict[str, float]  # the shards' jobs tables, summed
    indexes: dict[str, float]  # MiB by index name, summed over the shards
    cpu: dict[str, float]  # CPU seconds so far by kind of process
    broker_disk_mib: float
    page_cache_mib: float
    # Counters so far: the shards' blocks read from outside shared buffers and found in
    # them (pg_stat_database), and the machine's CPU seconds waiting on I/O.
    counters: dict[str, float] = field(default_factory=dict)


def soak_result(
    *,
    minutes: int,
    samples: list[Sample],
    jobs: dict,
    loadgen: dict,
    roles: list[memory.Role],
    setup: str,
) -> dict:
    """The scenario's numbers, checks and table from what the run collected."""
    start = jobs["first_request"]
    lateness = soak_numbers.minute_lateness(jobs["started_minus_due"], minutes)
    dispatch = soak_numbers.minute_lateness(jobs["dispatched_minus_due"], minutes)
    memory_by_role = _memory_series(samples, [role.name for role in roles], start, minutes)
    tables = {
        name: soak_numbers.minute_levels(
            [(s.at, s.tables.get(name, 0.0)) for s in samples], start=start, minutes=minutes
        )
        for name in TABLE_FIELDS
    }
    index_names = sorted({name for s in samples for name in s.indexes})
    tables["index_mib"] = {
        name: soak_numbers.minute_levels(
            [(s.at, s.indexes.get(name, 0.0)) for s in samples], start=start, minutes=minutes
        )
        for name in index_names
    }
    kinds = sorted({kind for s in samples for kind in s.cpu if kind != StackCpu.MACHINE})
    cpu_cores = {
        kind: soak_numbers.minute_rates(
            [(s.at, s.cpu.get(kind, 0.0)) for s in samples], start=start, minutes=minutes
        )
        for kind in [*kinds, StackCpu.MACHINE]
    }
    created_per_s = soak_numbers.per_minute_rate(jobs["created_per_minute"], minutes)
    checks = {
        "rate_held": soak_numbers.rate_check(created_per_s, PEAK_RATE),
        **_checks(lateness, memory_by_role, jobs, loadgen),
    }
    result = {
        "minutes": minutes,
        "rate_per_second": PEAK_RATE,
        "per_minute": {
            "created_per_s": created_per_s,
            "started_per_s": soak_numbers.per_minute_rate(jobs["started_per_minute"], minutes),
            "started_minus_due_ms": lateness,
            "dispatched_minus_due_ms": dispatch,
        },
        "memory_mib": memory_by_role,
        "tables": tables,
        "broker_disk_mib": soak_numbers.minute_levels(
            [(s.at, s.broker_disk_mib) for s in samples], start=start, minutes=minutes
        ),
        "page_cache_mib": soak_numbers.minute_levels(
            [(s.at, s.page_cache_mib) for s in samples], start=start, minutes=minutes
        ),
        "cpu_cores": cpu_cores,
        # Per second in each minute: blocks the shards read from outside their shared
        # buffers and found in them, and the machine's cores waiting on I/O.
        "io": {
            name: soak_numbers.minute_rates(
                [(s.at, s.counters[counter]) for s in samples if counter in s.counters],
                start=start,
                minutes=minutes,
            )
            for name, counter in (
                ("blocks_read_per_s", "blocks_read"),
                ("blocks_hit_per_s", "blocks_hit"),
                ("iowait_cores", "iowait_seconds"),
            )
        },
        "late_jobs": None
        if jobs.get("late_ms") is None
        else soak_numbers.late_jobs(jobs["late_rows"], jobs["late_ms"]),
        "statuses": jobs["statuses"],
        "early": jobs["early"],
        "loadgen": {
            key: loadgen.get(key)
            for key in (
                "created",
                "created_per_second",
                "executed",
                "statuses",
                "unfinished",
                "errors",
                "dropped_slots",
                "request_latency",
            )
        },
        "samples": len(samples),
        "checks": checks,
        "passed": all(check["passed"] for check in checks.values()),
        "setup": setup,
    }
    result["markdown"] = soak_markdown(result)
    return result


def _memory_series(
    samples: list[Sample], roles: list[str], start: float, minutes: int
) -> dict[str, dict]:
    series = {}
    for role in roles:
        measures = {}
        for measure in ("rss", "pss", "pss_anon", "pss_file", "pss_shmem", "unshared"):
            points = [
                (s.at, value)
                for s in samples
                if (value := _measure(s.memory.get(role, {}), measure)) is not None
            ]
            if points:
                measures[f"{measure}_mib"] = soak_numbers.minute_levels(
                    points, start=start, minutes=minutes
                )
        rss = [s.memory.get(role, {}).get("rss", 0.0) for s in samples]
        measures["peak_rss_mib"] = round(max(rss, default=0.0), 1)
        measures["growth"] = soak_numbers.growth(measures.get("unshared_mib", []))
        series[role] = measures
    return series


def _measure(memory: dict[str, float], measure: str) -> float | None:
    """One measure of a role's memory; ``unshared`` is its PSS less shared memory (the
    growth test's measure: PostgreSQL allocates its shared buffers at start and its
    backends touch them over the run, which PSS would count as growth)."""
    if measure != "unshared":
        return memory.get(measure)
    if "pss" not in memory:
        return None
    return round(memory["pss"] - memory.get("pss_shmem", 0.0), 1)


def _checks(lateness: list[dict], memory_by_role: dict, jobs: dict, loadgen: dict) -> dict:
    grown = sorted(
        role
        for role, measures in memory_by_role.items()
        if role != "loadgen" and measures["growth"]["grows"]
    )
    worker_peaks = {
        role: measures["peak_rss_mib"]
        for role, measures in memory_by_role.items()
        if role.startswith(("scheduler", "executor"))
    }
    created = loadgen.get("created", 0)
    succeeded = jobs["statuses"].get("succeeded", 0)
    return {
        "lateness": soak_numbers.lateness_checks(lateness),
        "memory_growth": {
            "tolerance": soak_numbers.GROWTH_TOLERANCE,
            "grown": grown,
            "passed": not grown,
        },
        "worker_rss": {
            "limit_mib": soak_numbers.WORKER_RSS_LIMIT_MIB,
            "peaks_mib": worker_peaks,
            "passed": all(
                peak <= soak_numbers.WORKER_RSS_LIMIT_MIB for peak in worker_peaks.values()
            ),
        },
        "every_job_ran": {
            "created": created,
            "succeeded": succeeded,
            "early": jobs["early"],
            "passed": created > 0 and succeeded == created and jobs["early"] == 0,
        },
    }


def _cell(value, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _signed(value) -> str:
    return "-" if value is None else f"{value:+,.1f}"


def soak_markdown(result: dict) -> str:
    """A row per minute, then the checks."""
    per_minute, memory_by_role, tables = (
        result["per_minute"],
        result["memory_mib"],
        result["tables"],
    )
    roles = [role for role in memory_by_role if role != "loadgen"]
    busy = result["cpu_cores"][StackCpu.MACHINE]
    lines = [
        "| min | created/s | started/s | started - due p50 / p99 / max ms "
        "| dispatched - due p99 ms "
        + "".join(f"| {role} MiB " for role in roles)
        + "| jobs tables MiB (indexes) | dead tuples | cores busy |",
        "|---:|---:|---:|---:|---:" + "|---:" * len(roles) + "|---:|---:|---:|",
    ]
    for minute in range(result["minutes"]):
        late = per_minute["started_minus_due_ms"][minute]
        lines.append(
            f"| {minute + 1} | {_cell(per_minute['created_per_s'][minute])} "
            f"| {_cell(per_minute['started_per_s'][minute])} "
            f"| {_cell(late['p50_ms'])} / {_cell(late['p99_ms'])} / {_cell(late['max_ms'])} "
            f"| {_cell(per_minute['dispatched_minus_due_ms'][minute]['p99_ms'])} "
            + "".join(f"| {_cell(memory_by_role[role]['pss_mib'][minute])} " for role in roles)
            + f"| {_cell(tables['total_mib'][minute])} ({_cell(tables['indexes_mib'][minute])}) "
            f"| {_cell(tables['dead_tuples'][minute])} "
            f"| {_cell(busy[minute], 2)} |"
        )
    checks = result["checks"]
    held, late, grown, rss, ran = (
        checks["rate_held"],
        checks["lateness"],
        checks["memory_growth"],
        checks["worker_rss"],
        checks["every_job_ran"],
    )
    drifted = soak_numbers.drift(result)
    lines += [
        "",
        f"**{'Passed' if result['passed'] else 'Failed'}.** "
        f"Load: at least {held['at_least']:,.0f} jobs/s created in every minute "
        f"({_over(held['minutes_short'])}). "
        f"Lateness: p99 at most {late['p99_limit_ms']:g} ms in every minute "
        f"({_over(late['minutes_over_limit'])}), "
        f"none above {late['creep_limit']:g} x minute 2's {_cell(late['minute_2_p99_ms'])} ms "
        f"({_crept(late['minutes_crept'])}). "
        f"Memory growth from minute 2 on (slope x span over {grown['tolerance']:.0%} of the "
        f"level): {', '.join(grown['grown']) or 'none'}. "
        f"Worker peak RSS: {', '.join(f'{r} {v:.0f}' for r, v in rss['peaks_mib'].items())} MiB "
        f"(limit {rss['limit_mib']:g}). "
        f"Jobs: {ran['created']:,} created, {ran['succeeded']:,} succeeded, {ran['early']} early.",
        "",
        "Cores busy: the whole machine's, which the stack and the load generator share. "
        "Correlation of a minute's p99 lateness with them: "
        f"{_cell(soak_numbers.p99_follows_busy_cores(result), 2)} (Pearson's r). "
        f"From minute 2 on, p99 lateness moved {_signed(drifted['p99_trend_ms'])} ms "
        "(slope x span), and the load generator's CPU, for the same work every minute, "
        f"was x{_cell(drifted['loadgen_cpu'], 2)} in the later half of the minutes against "
        "the earlier half: the machine's speed moving shows there."
        + _late_jobs(result.get("late_jobs")),
        "",
        "Memory is PSS (shared pages split between the processes that map them), summed "
        "over a server's processes; the growth test leaves out shared memory (PostgreSQL's "
        "shared buffers, allocated at start and touched over the run: pss_shmem_mib in "
        "results.json). Minutes count from the first request (lateness and started/s from "
        "the first due time, 5 s later).",
    ]
    return "\n".join(lines)


def _late_jobs(late: dict | None) -> str:
    """Where the jobs that count against a minute's p99 were (``soak_numbers.late_jobs``)."""
    if not late or not late["late"]:
        return ""
    return (
        f" Jobs later than {late['late_ms']:g} ms ({soak_numbers.CREEP_LIMIT:g} x minute 2's "
        f"p99): {late['late']:,} ({late['late_pct']:g} %), {late['in_worst_seconds']:.0%} "
        f"of them due in the worst {late['worst_seconds']:,} of {late['seconds']:,} seconds; "
        f"{_pct_range(late['by_shard_pct'])} of each shard's jobs, "
        f"{_pct_range(late['by_partition_pct'])} of each partition's."
    )


def _pct_range(spread: list[float] | None) -> str:
    return "-" if spread is None else f"{spread[0]:g}-{spread[1]:g} %"


def _minutes(minutes: list[int]) -> str:
    return ", ".join(str(m) for m in minutes)


def _over(minutes: list[int]) -> str:
    return "yes" if not minutes else f"no: minutes {_minutes(minutes)}"


def _crept(crept: list[int] | None) -> str:
    if crept is None:
        return "no minute 2 to compare with"
    return "none did" if not crept else f"minutes {_minutes(crept)} did"
