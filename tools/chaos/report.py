"""The campaign's result as a markdown table and JSON, and whether it failed.

It fails when a job was lost, delivered twice for one attempt or started early; when a
fault's latest job started more than the bound late; or when a check failed (a client's
answer during a fault, what an unanswered create left behind).
"""

from __future__ import annotations

import json
from pathlib import Path

from .checker import LATE_SECONDS

FAILING = ("lost", "duplicate", "early")  # any of these non-zero fails the campaign


def over_bound(result: dict) -> list[dict]:
    """The faults whose latest job started more than the bound late."""
    bound = result["bound_s"]
    return [
        fault
        for fault in result["faults"]
        if fault["check"]["max_late_s"] is not None and fault["check"]["max_late_s"] > bound
    ]


def failed_checks(result: dict) -> list[tuple[str, dict]]:
    """(where, check) for every check that failed: a fault's, or the campaign's own."""
    found = [
        (f"#{index} {fault['fault']}", check)
        for index, fault in enumerate(result["faults"], start=1)
        for check in fault["checks"]
        if not check["ok"]
    ]
    return found + [("campaign", check) for check in result["checks"] if not check["ok"]]


def failed(result: dict) -> bool:
    return (
        any(result["total"][key] for key in FAILING)
        or bool(over_bound(result))
        or bool(failed_checks(result))
    )


def _seconds(value: float | None) -> str:
    return "not within 30 s" if value is None else f"{value:.1f}"


def _late(fault: dict, bound: float) -> str:
    late = fault["check"]["max_late_s"]
    if late is None:
        return "-"
    return f"**{late:.1f}**" if late > bound else f"{late:.1f}"


def _checks(fault: dict) -> str:
    if not fault["checks"]:
        return ""
    passed = sum(check["ok"] for check in fault["checks"])
    return f"{passed}/{len(fault['checks'])}" + ("" if passed == len(fault["checks"]) else " **!**")


def markdown(result: dict, *, command: str) -> str:
    total, bound = result["total"], result["bound_s"]
    lines = [
        f"`{command}`: seed {result['seed']}, {result['seconds']:.0f} s, "
        f"{total['jobs']:,} jobs acknowledged ({result['indeterminate_creates']} creates "
        f"left unacknowledged), {result['deliveries']:,} deliveries.",
        "",
        "| # | phase | fault | held s | jobs due | lost | dup | early | re-run | late | bound from "
        "| max late s | shards run again s | on time again s | API acks again s | checks |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for index, fault in enumerate(result["faults"], start=1):
        check = fault["check"]
        lines.append(
            f"| {index} | {fault['phase']} | {fault['fault']} | {fault['held_s']:.1f} "
            f"| {check['jobs']} | {check['lost']} | {check['duplicate']} | {check['early']} "
            f"| {check['rerun']} | {check['late']} | {fault['bound_from']} "
            f"| {_late(fault, bound)} | {_seconds(fault['running_again_s'])} "
            f"| {fault['on_time_again_s']:.1f} | {_seconds(fault['api_again_s'])} "
            f"| {_checks(fault)} |"
        )
    lines.append(
        f"| | | **all** (incl. {result['before_faults']['jobs']} before the first fault) | "
        f"| {total['jobs']} | **{total['lost']}** | **{total['duplicate']}** "
        f"| **{total['early']}** | {total['rerun']} | {total['late']} | | | | | | |"
    )
    lines += [
        "",
        f"lost: not succeeded at the end (or an http job never delivered); dup: a (job, "
        f"attempt) delivered twice; early: started before execute_at by the true clock; "
        f"re-run: delivered in several attempts; late: started > {LATE_SECONDS:g} s after "
        "due. A job counts under the last fault injected before it should have started "
        "(due + 1 s). *max late*: the latest first start of those jobs, from when the bound "
        f"starts (*bound from*: their due time, for one worker's fault, which others must "
        f"take over; else the later of due time and heal); bound {bound:g} s. Recovery from "
        "the heal: every shard started a job due after it; the last job of the window "
        "started > 1 s late started; the API acknowledged a create. *checks*: passed of "
        "those the fault makes (a client's answer during it).",
        "",
        _phases(result),
    ]
    if result.get("left_out"):
        lines.append(
            "Left out on this machine: "
            + "; ".join(f"{kind} ({why})" for kind, why in result["left_out"].items())
            + "."
        )
    lines += ["", _verdict(result)]
    return "\n".join(lines)


def _phases(result: dict) -> str:
    """The maximum lateness in each phase of the schedule, and where."""
    parts = []
    for phase in ("single", "mixed", "failover"):
        timed = [
            (fault["check"]["max_late_s"], index, fault["fault"])
            for index, fault in enumerate(result["faults"], start=1)
            if fault["phase"] == phase and fault["check"]["max_late_s"] is not None
        ]
        if timed:
            late, index, name = max(timed)
            parts.append(f"{phase}: {late:.1f} s (#{index} {name})")
    return "Max lateness by phase: " + ("; ".join(parts) or "no jobs") + "."


def _verdict(result: dict) -> str:
    total, bound = result["total"], result["bound_s"]
    late = over_bound(result)
    checks = failed_checks(result)
    lines = [
        f"**{'FAILED' if failed(result) else 'PASSED'}**: lost {total['lost']}, duplicate "
        f"{total['duplicate']}, early {total['early']}, faults over the {bound:g} s bound "
        f"{len(late)}, failed checks {len(checks)}."
    ]
    for key in FAILING:
        if total["examples"][key]:
            lines.append(f"- {key}: {', '.join(total['examples'][key])}")
    for fault in late:
        lines.append(
            f"- over the bound: {fault['fault']}: {fault['check']['over_bound']} jobs; "
            f"latest {fault['check']['examples']['latest']}"
        )
    for where, check in checks:
        lines.append(f"- check failed ({where}): {check['name']}: {check['detail']}")
    return "\n".join(lines)


def write(result: dict, *, out: Path, command: str) -> str:
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(result, command=command)
    (out / "results.json").write_text(json.dumps(result, indent=2))
    (out / "report.md").write_text(text + "\n")
    return text
