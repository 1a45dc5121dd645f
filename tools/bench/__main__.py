"""The benchmark suite: ``python -m tools.bench [--quick] [--only NAME ...]``.

Run it through ``make bench`` (``python -m tools.devstack bench``), which starts a
throwaway stack first and passes its environment in. Each scenario starts the app
processes it needs on that stack, measures, and returns its numbers; the suite writes
them to ``bench-results/results.json`` and a Markdown report ``bench-results/report.md``
with PNG plots next to it (``tools/bench/report.py``, ``tools/bench/plots.py``).

A run without ``--only`` runs every scenario but the soak (``tools/bench/soak.py``: half an
hour at the design peak), which runs when named: ``--only soak [--soak-minutes N]
[--soak-lead SECONDS]``. The ``peers`` scenario (``tools/bench/peers/``) is part of the
full run.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from tools.bench import machine_speed, report
from tools.bench.plots import Plot, plot_scenario
from tools.bench.processes import stop_on_sigterm
from tools.bench.scenarios import ON_REQUEST, SCENARIOS, BenchContext

RESULTS_DIR = Path("bench-results")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: the suite in minutes")
    parser.add_argument(
        "--only",
        nargs="*",
        choices=sorted(SCENARIOS),
        help="scenarios to run (default: all but "
        + ", ".join(sorted(ON_REQUEST))
        + ", which run only when named here)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="results directory")
    parser.add_argument(
        "--job-times",
        action="store_true",
        help="fairness scenarios also write every job's shard, dispatch and start times",
    )
    parser.add_argument(
        "--soak-minutes",
        type=_positive_int,
        default=30,
        metavar="N",
        help="minutes the soak creates jobs at the design peak (default 30)",
    )
    parser.add_argument(
        "--soak-lead",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="seconds from a soak job's create request to its due time (default 5; 0: "
        "each job due at its request)",
    )
    args = parser.parse_args(argv)
    stop_on_sigterm()  # the launcher passes SIGTERM on: the scenario's workers must stop
    if "JOBSVC_CONTROL_DB_URL" not in os.environ:
        parser.error("run through `make bench` (python -m tools.devstack bench): no stack")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsvc.settings")
    import django

    django.setup()
    args.out.mkdir(parents=True, exist_ok=True)
    context = BenchContext(
        quick=args.quick,
        out=args.out,
        env=dict(os.environ),
        job_times=args.job_times,
        soak_minutes=args.soak_minutes,
        soak_lead=args.soak_lead,
    )
    machine = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "commit": _commit(),
        "reference_ms_start": machine_speed.reference_ms(),
    }
    results: dict[str, dict] = {}
    sections: list[str] = []
    for name in args.only or [name for name in SCENARIOS if name not in ON_REQUEST]:
        started = time.monotonic()
        print(f"== {name}", flush=True)
        result = SCENARIOS[name](context)
        result["seconds"] = round(time.monotonic() - started, 1)
        markdown = result.pop("markdown", "")
        results[name] = result
        plots, notes = _plots(name, result, args.out)
        sections.append(
            report.section(
                name,
                markdown=markdown,
                setup=result.get("setup"),
                plots=plots,
                seconds=result["seconds"],
                notes=notes,
            )
        )
        print(sections[-1], flush=True)
        report.write(args.out, machine=machine, results=results, sections=sections)
    machine["reference_ms_end"] = machine_speed.reference_ms()
    report.write(args.out, machine=machine, results=results, sections=sections)
    print(f"results in {args.out}/", flush=True)
    return 0


def _commit() -> str | None:
    """The commit the tree is at, "+changes" if tracked files differ from it; None
    outside a git checkout."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, check=True, cwd=Path(__file__).parent
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short=7", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+changes" if changed else "")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _plots(name: str, result: dict, out: Path) -> tuple[list[Plot], list[str]]:
    """The scenario's plots; a plot that fails is a note in the report, never a lost run."""
    try:
        return plot_scenario(name, result, out), []
    except Exception as exc:  # any plotting error: the numbers are still worth writing
        print(f"plots of {name} failed: {exc!r}", flush=True)
        return [], [f"_(plots failed: {exc!r})_"]


if __name__ == "__main__":
    sys.exit(main())
