"""The suite's output files: ``results.json`` (every number) and ``report.md`` (tables,
each scenario's setup, plots). Both are rewritten after every scenario, so an
interrupted or failed run keeps what it measured so far."""

from __future__ import annotations

import json
from pathlib import Path

from tools.bench import machine_speed
from tools.bench.plots import Plot

RESULTS_FILE = "results.json"
REPORT_FILE = "report.md"


def header(machine: dict) -> str:
    return (
        f"# Benchmark report\n\n{machine['date']}, {machine['cores']} cores, "
        f"Python {machine['python']}, {machine['platform']}, {machine['mode']} mode"
        f"{machine_speed.described(machine)}\n"
    )


def section(
    name: str,
    *,
    markdown: str,
    setup: str | None,
    plots: list[Plot],
    seconds: float,
    notes: list[str] = (),
) -> str:
    """One scenario: its table, its setup (unless its table already states it), plots."""
    parts = [f"## {name}", markdown.strip()]
    if setup and setup not in markdown:
        parts.append(f"Setup: {setup.rstrip('.')}.")
    parts += [f"![{plot.title}]({plot.file})" for plot in plots]
    parts += list(notes)
    parts.append(f"_{seconds:.0f} s for this scenario._")
    return "\n\n".join(part for part in parts if part) + "\n"


def write(out: Path, *, machine: dict, results: dict[str, dict], sections: list[str]) -> None:
    (out / RESULTS_FILE).write_text(json.dumps({"machine": machine, **results}, indent=2))
    (out / REPORT_FILE).write_text(header(machine) + "\n" + "\n".join(sections))
