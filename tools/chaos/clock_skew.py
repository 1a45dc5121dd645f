"""Clock skew faults: a worker restarted with its wall clock `SKEW_SECONDS` ahead or
behind, held for `SKEW_HOLD_SECONDS`, then restarted with the true clock.

The skew comes from `clock_shift.c`, an LD_PRELOAD shim that moves only the wall clock
(`clock_gettime(CLOCK_REALTIME)`, `gettimeofday`, `time`) and leaves the monotonic clock
alone; it is compiled with gcc into the run's directory on first use. Nothing may start
early by the true clock: the checker judges starts by the receiver's clock and the
database's, which the shim does not touch.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .faults import Fault
from .system import System

SKEW_SECONDS = 3.0  # how far the worker's wall clock is off
SKEW_HOLD_SECONDS = 12.0  # how long the worker runs with it
SHIFT_VARIABLE = "JOBSVC_CHAOS_CLOCK_SHIFT_SECONDS"  # read by the shim: seconds, signed
SOURCE = Path(__file__).with_name("clock_shift.c")
LIBRARY = "clock_shift.so"


def available() -> str | None:
    """None when the shim can be built here, else why not."""
    if shutil.which("gcc") is None:
        return "clock skew needs gcc to build its LD_PRELOAD shim (`apt-get install gcc`)"
    return None


def build_shim(directory: Path) -> Path:
    """`clock_shift.so` in `directory`, compiled if missing."""
    library = directory / LIBRARY
    if not library.exists():
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-o", str(library), str(SOURCE), "-ldl"],
            check=True,
            capture_output=True,
        )
    return library


def shifted_env(library: Path, seconds: float) -> dict[str, str]:
    """The environment of a process whose wall clock runs `seconds` ahead (behind if < 0)."""
    return {"LD_PRELOAD": str(library), SHIFT_VARIABLE: f"{seconds:+g}"}


def skew(app: str, seconds: float) -> Fault:
    way = "ahead" if seconds > 0 else "behind"

    def inject(system: System) -> str:
        system.start_app(app, env=shifted_env(build_shim(system.root), seconds))
        return f"restarted with its clock {abs(seconds):g} s {way}"

    def heal(system: System) -> str:
        system.start_app(app)
        return "restarted with the true clock"

    return Fault(
        name=f"skew {app} {seconds:+g}s",
        what=f"{app} restarted with its wall clock {abs(seconds):g} s {way} for "
        f"{SKEW_HOLD_SECONDS:g} s, then restarted with the true clock",
        inject=inject,
        heal=heal,
        hold=SKEW_HOLD_SECONDS,
        targets=frozenset({app}),
        takeover=True,
    )


def skew_faults(*, scheduler: str, executor: str) -> list[Fault]:
    """Every clock skew fault, in campaign order."""
    return [
        skew(executor, SKEW_SECONDS),
        skew(executor, -SKEW_SECONDS),
        skew(scheduler, SKEW_SECONDS),
        skew(scheduler, -SKEW_SECONDS),
    ]
