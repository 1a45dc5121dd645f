"""The campaign's result as a markdown table (for the README) and JSON."""

from __future__ import annotations

import json
from pathlib import Path

from .checker import LATE_SECONDS

FAILING = ("lost", "duplicate", "early")  # any of these non-zero fails the campaign


def failed(result: dict) -> bool:
    return any(result["total"][key] for key in FAILING)


def _seconds(value: float | None) -> str:
    return "not within 30 s" if value is None else f"{value:.1f}"


def markdown(result: dict, *, command: str) -> str:
    total = result["total"]
    lines = [
        f"`{command}`: seed {result['seed']}, {result['seconds']:.0f} s, "
        f"{total['jobs']:,} jobs acknowledged ({result['indeterminate_creates']} creates "
        f"left unacknowledged), {result['deliveries']:,} deliveries.",
        "",
        "| # | fault | held s | jobs due | lost | dup | early | re-run | late | shards run again s "
        "| on time again s | API acks again s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for index, fault in enumerate(result["faults"], start=1):
        check = fault["check"]
        lines.append(
            f"| {index} | {fault['fault']} | {fault['held_s']:.1f} | {check['jobs']} "
            f"| {check['lost']} | {check['duplicate']} | {check['early']} | {check['rerun']} "
            f"| {check['late']} | {_seconds(fault['running_again_s'])} "
            f"| {fault['on_time_again_s']:.1f} | {_seconds(fault['api_again_s'])} |"
        )
    lines.append(
        f"| | **all** (incl. {result['before_faults']['jobs']} before the first fault) | "
        f"| {total['jobs']} | **{total['lost']}** | **{total['duplicate']}** "
        f"| **{total['early']}** | {total['rerun']} | {total['late']} | | | |"
    )
    lines += [
        "",
        f"lost: not succeeded at the end (or an http job never delivered); dup: a (job, "
        f"attempt) delivered twice; early: started before execute_at; re-run: delivered in "
        f"several attempts; late: started > {LATE_SECONDS:g} s after due. A job counts "
        "under the last fault injected before it should have started (due + 1 s). "
        "Recovery from the heal: every shard started a job due after it; the last job of "
        "the window started > 1 s late started; the API acknowledged a create.",
        "",
        f"**{'FAILED' if failed(result) else 'PASSED'}**: lost {total['lost']}, duplicate "
        f"{total['duplicate']}, early {total['early']}.",
    ]
    for key in FAILING:
        if total["examples"][key]:
            lines.append(f"- {key}: {', '.join(total['examples'][key])}")
    return "\n".join(lines)


def write(result: dict, *, out: Path, command: str) -> str:
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(result, command=command)
    (out / "results.json").write_text(json.dumps(result, indent=2))
    (out / "report.md").write_text(text + "\n")
    return text
