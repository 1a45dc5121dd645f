"""Name resolution at create time, within a budget per request.

The http handler checks, when a job is created, that its URL's host resolves only to
public addresses. A bulk request of 1,000 jobs naming 1,000 hosts would make 1,000
lookups, one after the other, in one API worker: with a slow resolver, or a wildcard
allow-list under a domain an attacker's DNS answers for, that holds the worker for
minutes. Inside ``resolution_budget`` (one API request) each distinct host is resolved
once, at most ``max_hosts`` distinct hosts are resolved, and no lookup starts after
``max_seconds`` of lookups; past either, the job is refused (400), naming the budget.
Outside a budget (the executor) every call resolves.

A single lookup still takes as long as the system resolver lets it (``getaddrinfo``
cannot be interrupted); the budget bounds how many follow it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from jobsvc.handlers.errors import InvalidHandlerParams
from jobsvc.handlers.http_policy import resolve_host


@dataclass
class _Budget:
    max_hosts: int
    max_seconds: float
    clock: Callable[[], float]
    spent: float = 0.0
    answers: dict[tuple[str, int], list[str] | OSError] = field(default_factory=dict)


_budget: ContextVar[_Budget | None] = ContextVar("jobsvc_resolution_budget", default=None)


@contextmanager
def resolution_budget(
    *, max_hosts: int, max_seconds: float, clock: Callable[[], float] = time.monotonic
) -> Iterator[None]:
    """Resolve names within this budget for the block (one request's validation)."""
    token = _budget.set(_Budget(max_hosts=max_hosts, max_seconds=max_seconds, clock=clock))
    try:
        yield
    finally:
        _budget.reset(token)


def budgeted_resolver(
    resolve: Callable[[str, int], list[str]] = resolve_host,
) -> Callable[[str, int], list[str]]:
    """A resolver (``host, port -> addresses``) that keeps to the current budget, if any."""

    def resolver(host: str, port: int) -> list[str]:
        budget = _budget.get()
        if budget is None:
            return resolve(host, port)
        key = (host.lower(), port)
        if key in budget.answers:
            answer = budget.answers[key]
            if isinstance(answer, OSError):
                raise answer
            return answer
        if len(budget.answers) >= budget.max_hosts:
            raise InvalidHandlerParams(
                f"url: one request may name at most {budget.max_hosts} distinct hosts for "
                "the http handler; send the jobs in several requests."
            )
        if budget.spent >= budget.max_seconds:
            raise InvalidHandlerParams(
                f"url: resolving this request's hosts took over {budget.max_seconds:g} s; "
                "send the jobs in several requests."
            )
        started = budget.clock()
        try:
            budget.answers[key] = resolve(host, port)
        except OSError as exc:
            budget.answers[key] = exc
            raise
        finally:
            budget.spent += budget.clock() - started
        return budget.answers[key]

    return resolver
