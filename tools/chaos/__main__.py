"""`python -m tools.chaos`: see the package docstring."""

from __future__ import annotations

import argparse
import logging
import random
import shlex
import signal
import sys
from pathlib import Path

from . import report
from .checker import BOUND_SECONDS
from .runner import Options, run_campaign

DEFAULT_MIXED = 15  # faults drawn at random after the single pass
DEFAULT_RATE = 20.0  # creates per second
MAX_BURST = 1000  # jobs in one bulk request (JOBSVC_MAX_BULK_JOBS)


def _burst_size(value: str) -> int:
    jobs = int(value)
    if not 0 <= jobs <= MAX_BURST:
        raise argparse.ArgumentTypeError(f"a burst is 0 to {MAX_BURST:,} jobs, got {jobs}")
    return jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.chaos", description=__doc__)
    parser.add_argument(
        "--replicas",
        type=int,
        choices=(0, 1),
        default=0,
        help="a synchronous standby per PostgreSQL server, and the failover fault",
    )
    parser.add_argument("--seed", type=int, help="replays the mixed phase (printed when drawn)")
    parser.add_argument(
        "--mixed", type=int, default=DEFAULT_MIXED, help="random faults after the single pass"
    )
    parser.add_argument(
        "--short", action="store_true", help="one pass of each fault, no mixed phase"
    )
    parser.add_argument("--rate", type=float, default=DEFAULT_RATE, help="job creates per second")
    parser.add_argument(
        "--burst",
        type=_burst_size,
        default=0,
        metavar="N",
        help="a fourth user also creates N no-op jobs (at most 1,000) in one request every 5 s,"
        " all due at once: a backlog both executors hold",
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated fault names to keep, e.g. 'kill api,restart broker'",
    )
    parser.add_argument(
        "--timing",
        action="append",
        default=[],
        metavar="VARIABLE=VALUE",
        help="a worker setting over the fast timings (JOBSVC_SCHEDULER_QUEUED_TIMEOUT_SECONDS=60)",
    )
    parser.add_argument(
        "--bound",
        type=float,
        default=BOUND_SECONDS,
        help="seconds a job due during a fault may start late (from its due time under one"
        " worker's fault, else from the later of due time and heal); more fails the run",
    )
    parser.add_argument("--out", type=Path, default=Path("chaos-results"))
    parser.add_argument("--keep", action="store_true", help="keep the stack's data and logs")
    args = parser.parse_args(argv)
    # SIGTERM (a test's timeout, a CI cancel) unwinds like Ctrl-C: the stack is stopped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s chaos %(levelname)s %(message)s", datefmt="%H:%M:%S"
    )
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    print(f"chaos seed: {seed} (replay: --seed {seed})", flush=True)
    options = Options(
        seed=seed,
        replicas=args.replicas,
        mixed=0 if args.short else args.mixed,
        rate=args.rate,
        out=args.out,
        keep=args.keep,
        timings=tuple(tuple(item.split("=", 1)) for item in args.timing),
        only=tuple(name.strip() for name in args.only.split(",") if name.strip()),
        burst=args.burst,
        bound=args.bound,
    )
    result = run_campaign(options)
    command = "python -m tools.chaos " + shlex.join([*replay_options(args), "--seed", str(seed)])
    print(report.write(result, out=args.out, command=command), flush=True)
    print(f"chaos seed: {seed}; results in {args.out}/", flush=True)
    return 1 if report.failed(result) else 0


def replay_options(args: argparse.Namespace) -> list[str]:
    """The options that shaped the run, so that the report's command replays it."""
    return [
        *(["--replicas", "1"] if args.replicas else []),
        *(["--short"] if args.short else []),
        *(["--mixed", str(args.mixed)] if args.mixed != DEFAULT_MIXED and not args.short else []),
        *(["--rate", f"{args.rate:g}"] if args.rate != DEFAULT_RATE else []),
        *(["--burst", str(args.burst)] if args.burst else []),
        *(["--bound", f"{args.bound:g}"] if args.bound != BOUND_SECONDS else []),
        *(["--only", args.only] if args.only else []),
        *[option for timing in args.timing for option in ("--timing", timing)],
    ]


if __name__ == "__main__":
    sys.exit(main())
