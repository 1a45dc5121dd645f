"""The benchmark scenarios, by name. Each takes a BenchContext and returns its numbers.

A scenario returns a JSON-able dict; its ``markdown`` entry (a table) goes to the report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BenchContext:
    quick: bool  # small sizes, for a run of a few minutes
    out: Path  # where results and plots go
    env: dict[str, str]  # the stack's environment, for the processes a scenario starts


def api_create(context: BenchContext) -> dict:
    from deploy.bench.api_create import run_against_new_api

    return run_against_new_api(context)


SCENARIOS: dict[str, Callable[[BenchContext], dict]] = {
    "api_create": api_create,
}
