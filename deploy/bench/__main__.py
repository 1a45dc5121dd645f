"""The benchmark suite: ``python -m deploy.bench [--quick] [--only NAME ...]``.

Run it through ``make bench`` (``python -m deploy.localstack bench``), which starts a
throwaway stack first and passes its environment in. Each scenario starts the app
processes it needs on that stack, measures, and returns its numbers; the suite writes
them to ``bench-results/results.json`` and a Markdown report ``bench-results/report.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from deploy.bench.scenarios import SCENARIOS, BenchContext

RESULTS_DIR = Path("bench-results")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: the suite in minutes")
    parser.add_argument("--only", nargs="*", choices=sorted(SCENARIOS), help="scenarios to run")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="results directory")
    args = parser.parse_args(argv)
    if "JOBSVC_CONTROL_DB_URL" not in os.environ:
        parser.error("run through `make bench` (python -m deploy.localstack bench): no stack")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsvc.settings")
    import django

    django.setup()
    args.out.mkdir(parents=True, exist_ok=True)
    context = BenchContext(quick=args.quick, out=args.out, env=dict(os.environ))
    machine = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
    }
    results: dict[str, dict] = {}
    sections: list[str] = []
    for name in args.only or list(SCENARIOS):
        started = time.monotonic()
        print(f"== {name}", flush=True)
        result = SCENARIOS[name](context)
        result["seconds"] = round(time.monotonic() - started, 1)
        results[name] = result
        sections.append(f"## {name}\n\n{result.pop('markdown', '')}\n")
        print(sections[-1], flush=True)
    (args.out / "results.json").write_text(json.dumps({"machine": machine, **results}, indent=2))
    header = (
        f"# Benchmark report\n\n{machine['date']}, {machine['cores']} cores, "
        f"Python {machine['python']}, {machine['mode']} mode\n\n"
    )
    (args.out / "report.md").write_text(header + "\n".join(sections))
    print(f"results in {args.out}/", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
