"""Drive a running system through its API: ``python -m tools.loadgen [options]``.

The logic is in ``tools.loadgen``; this reads the options, creates the run's users, prints
a line a second and the summary, and writes ``--json``. It needs the stack's environment
(``set -a; . .state/stack.env; set +a`` after ``make run``): it creates the users in the
control database and looks the jobs up in the shards.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

DESCRIPTION = (
    "Create jobs through the API at a target rate and print, once a second, created/s, "
    "dispatched/s, executed/s, backlog, lateness p50/p99 and errors; then a summary. "
    "Ctrl-C ends the run early (the summary is still printed)."
)


class UsageError(Exception):
    """An option the run cannot use."""


def main(argv: Sequence[str] | None = None, *, write: Callable[[str], None] | None = None) -> int:
    options = vars(_parser().parse_args(argv))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsvc.settings")
    import django

    django.setup()
    line = write or _print_line
    try:
        return run(options, line)
    except UsageError as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return 2


def run(options: dict, line: Callable[[str], None]) -> int:
    from jobsvc.sharding.ids import shard_of
    from tools.loadgen.database import lookup_jobs
    from tools.loadgen.errors import LoadgenError
    from tools.loadgen.runner import LoadGenerator
    from tools.loadgen.users import users_create_and_log_in, weights_for

    config = _config(options)
    try:
        config.validate()
        run_id = secrets.token_hex(3)
        logged_in = users_create_and_log_in(
            api=config.api,
            run_id=run_id,
            weights=weights_for(users=config.users, weights=list(config.weights)),
        )
        generator = LoadGenerator(
            config=config, users=logged_in.users, lookup=lookup_jobs, shard_of=shard_of, write=line
        )
    except LoadgenError as exc:
        raise UsageError(str(exc)) from exc
    line(
        f"run {run_id}: {config.users} users (weights "
        f"{', '.join(f'{w:g}' for w in config.weights)}, cycled), {config.rate:g} jobs/s "
        f"in requests of {config.bulk}, execute_at {config.lead:g} to "
        f"{config.lead + config.horizon:g} s after the request, "
        f"{config.duration:g} s, {config.concurrency} connections, against {config.api}"
    )
    if logged_in.issued_in_process:
        line(
            f"({logged_in.issued_in_process} logins were throttled by the API; their "
            "tokens were issued in process)"
        )
    summary = _run(generator)
    line(summary.text())
    if options["json"]:
        options["json"].parent.mkdir(parents=True, exist_ok=True)
        options["json"].write_text(json.dumps(summary.as_dict(), indent=2))
        line(f"summary written to {options['json']}")
    return 0


def _run(generator):
    """Run; SIGTERM stops it like Ctrl-C (only the main thread can take signals)."""
    if threading.current_thread() is not threading.main_thread():
        return generator.run()
    previous = signal.signal(signal.SIGTERM, lambda *_: generator.stop())
    try:
        return generator.run()
    finally:
        signal.signal(signal.SIGTERM, previous)


def _print_line(text: str) -> None:
    print(text, flush=True)


def _config(options: dict):
    from django.conf import settings

    from tools.loadgen.runner import LoadConfig

    try:
        weights = [float(part) for part in options["weights"].split(",") if part.strip()]
    except ValueError as exc:
        raise UsageError(f"--weights: {exc}") from exc
    if options["bulk"] > settings.MAX_BULK_JOBS:
        raise UsageError(f"--bulk: the API takes at most {settings.MAX_BULK_JOBS} a request")
    return LoadConfig(
        api=options["api"].rstrip("/"),
        users=options["users"],
        weights=tuple(weights),
        rate=options["rate"],
        horizon=options["horizon"],
        lead=options["lead"],
        bulk=options["bulk"],
        duration=options["duration"],
        concurrency=options["concurrency"],
        drain=options["drain"],
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.loadgen", description=DESCRIPTION)
    parser.add_argument("--api", default="http://127.0.0.1:8000", help="API base URL")
    parser.add_argument("--users", type=int, default=3, help="users to create (default 3)")
    parser.add_argument(
        "--weights",
        default="1",
        help="job weights, comma-separated, cycled over the users (default 1)",
    )
    parser.add_argument(
        "--rate", type=float, default=100.0, help="jobs per second, all users (default 100)"
    )
    parser.add_argument(
        "--horizon",
        type=float,
        default=0.0,
        help="execute_at is uniform in now+LEAD..now+LEAD+HORIZON seconds (default 0)",
    )
    parser.add_argument(
        "--lead",
        type=float,
        default=0.0,
        help="execute_at is at least LEAD seconds after the request is sent (default 0)",
    )
    parser.add_argument("--bulk", type=int, default=1, help="jobs per request (default 1)")
    parser.add_argument(
        "--duration", type=float, default=30.0, help="seconds of creating (default 30)"
    )
    parser.add_argument("--concurrency", type=int, default=4, help="HTTP connections (default 4)")
    parser.add_argument(
        "--drain",
        type=float,
        default=30.0,
        help="after creating, observe until every job finished, at most this many "
        "seconds (default 30)",
    )
    parser.add_argument("--json", type=Path, help="also write the summary here as JSON")
    return parser


if __name__ == "__main__":
    sys.exit(main())
