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
    job_times: bool = False  # fairness scenarios also save every job's times (job_times.py)
    soak_minutes: int = 30  # how long the soak creates jobs
    soak_lead: float = 5.0  # seconds from a soak job's create request to its due time


def api_create(context: BenchContext) -> dict:
    from tools.bench.api_create import run_against_new_api

    return run_against_new_api(context)


def dispatch_throughput(context: BenchContext) -> dict:
    from tools.bench.dispatch import run_throughput

    return run_throughput(context)


def dispatch_batch_selection(context: BenchContext) -> dict:
    from tools.bench.dispatch import run_batch_selection

    return run_batch_selection(context)


def dispatch_lateness(context: BenchContext) -> dict:
    from tools.bench.dispatch import run_lateness

    return run_lateness(context)


def dispatch_fairness(context: BenchContext) -> dict:
    from tools.bench.dispatch import run_fairness

    return run_fairness(context)


def fairness_end_to_end(context: BenchContext) -> dict:
    from tools.bench.fairness import run_fairness_end_to_end

    return run_fairness_end_to_end(context)


def fairness_single_creates(context: BenchContext) -> dict:
    from tools.bench.fairness import run_fairness_single_creates

    return run_fairness_single_creates(context)


def fairness_webhooks(context: BenchContext) -> dict:
    from tools.bench.fairness import run_fairness_webhooks

    return run_fairness_webhooks(context)


def light_user_wait(context: BenchContext) -> dict:
    from tools.bench.fairness import run_light_user_wait

    return run_light_user_wait(context)


def light_user_wait_webhooks(context: BenchContext) -> dict:
    from tools.bench.fairness import run_light_user_wait_webhooks

    return run_light_user_wait_webhooks(context)


def light_user_due_now(context: BenchContext) -> dict:
    from tools.bench.fairness import run_light_user_due_now

    return run_light_user_due_now(context)


def priority_in_own_backlog(context: BenchContext) -> dict:
    from tools.bench.priority import run_priority_in_own_backlog

    return run_priority_in_own_backlog(context)


def steady_beside_flood(context: BenchContext) -> dict:
    from tools.bench.steady_beside_flood import run_steady_beside_flood

    return run_steady_beside_flood(context)


def fairness_many_users(context: BenchContext) -> dict:
    from tools.bench.fairness_many import run_fairness_many_users

    return run_fairness_many_users(context)


def fairness_thousand_users(context: BenchContext) -> dict:
    from tools.bench.fairness_many import run_fairness_thousand_users

    return run_fairness_thousand_users(context)


def fairness_with_retries(context: BenchContext) -> dict:
    from tools.bench.fairness_many import run_fairness_with_retries

    return run_fairness_with_retries(context)


def end_to_end(context: BenchContext) -> dict:
    from tools.bench.end_to_end import run_end_to_end

    return run_end_to_end(context)


def soak(context: BenchContext) -> dict:
    from tools.bench.soak import run_soak

    return run_soak(context)


def peers(context: BenchContext) -> dict:
    from tools.bench.peers.scenario import run_peers

    return run_peers(context)


def attempt_history(context: BenchContext) -> dict:
    from tools.bench.attempt_history import run_attempt_history

    return run_attempt_history(context)


def failover(context: BenchContext) -> dict:
    from tools.bench.failover import run_failover

    return run_failover(context)


SCENARIOS: dict[str, Callable[[BenchContext], dict]] = {
    "api_create": api_create,
    "dispatch_throughput": dispatch_throughput,
    "dispatch_batch_selection": dispatch_batch_selection,
    "dispatch_lateness": dispatch_lateness,
    "dispatch_fairness": dispatch_fairness,
    "fairness_end_to_end": fairness_end_to_end,
    "fairness_single_creates": fairness_single_creates,
    "fairness_webhooks": fairness_webhooks,
    "light_user_wait": light_user_wait,
    "light_user_wait_webhooks": light_user_wait_webhooks,
    "light_user_due_now": light_user_due_now,
    "priority_in_own_backlog": priority_in_own_backlog,
    "steady_beside_flood": steady_beside_flood,
    "fairness_many_users": fairness_many_users,
    "fairness_thousand_users": fairness_thousand_users,
    "fairness_with_retries": fairness_with_retries,
    "end_to_end": end_to_end,
    "attempt_history": attempt_history,
    "failover": failover,
    "peers": peers,
    "soak": soak,
}
# Scenarios a run without --only leaves out: they take long (the soak: half an hour).
ON_REQUEST = frozenset({"soak"})
