"""How a limit tells its state to the client: the IETF RateLimit header fields.

draft-ietf-httpapi-ratelimit-headers (revision 11): ``RateLimit-Policy`` lists each quota
policy that applied to the request, ``"name";q=<quota>;w=<window seconds>``, and
``RateLimit`` what is left of each, ``"name";r=<remaining>;t=<seconds>``, where ``t`` is
when the quota is whole again (or, with nothing left, when a request may pass). Every
429 the service sends carries both and ``Retry-After``; the log-in, sign-up and password
endpoints send them on every answer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from functools import cache

_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Rate:
    count: int
    period: int  # seconds

    @property
    def interval(self) -> timedelta:
        """Time per request, rounded down to a microsecond: ``count`` always fit a period."""
        return timedelta(microseconds=self.period * 1_000_000 // self.count)


@cache
def parse_rate(text: str) -> Rate:
    """``"30/min"`` -> Rate(30, 60); ValueError for anything else."""
    count, _, period = text.partition("/")
    period = period.strip().lower()
    if not count.strip().isdigit() or period[:1] not in _PERIODS:
        raise ValueError(f"{text!r} is not a rate like 30/min (per s, min, hour or day)")
    rate = Rate(int(count), _PERIODS[period[0]])
    if not 1 <= rate.count <= rate.period * 1_000_000:
        raise ValueError(f"{text!r}: from 1 to a million per second")
    return rate


@dataclass(frozen=True)
class QuotaState:
    """One policy's quota, and what the client has left of it after this request."""

    policy: str  # a short name: letters, digits and hyphens
    quota: int  # units per window (or, without a window, at any one time)
    remaining: int
    window: int | None = None  # seconds; None for a quota not renewed over time
    reset: int | None = None  # seconds until the quota is whole (or a unit is free)
    unit: str | None = None  # "content-bytes"; None means requests (the draft's default)


def seconds(value: float) -> int:
    """Whole seconds for a header, rounded up: a client that waits that long is not early."""
    return max(0, math.ceil(value))


def rate_limit_headers(states: Iterable[QuotaState]) -> dict[str, str]:
    """The RateLimit-Policy and RateLimit fields of ``states``; none for no state."""
    states = list(states)
    if not states:
        return {}
    policies, limits = [], []
    for state in states:
        policy = f'"{state.policy}";q={max(0, state.quota)}'
        if state.unit is not None:
            policy += f';qu="{state.unit}"'
        if state.window is not None:
            policy += f";w={max(1, state.window)}"
        policies.append(policy)
        limit = f'"{state.policy}";r={max(0, state.remaining)}'
        if state.reset is not None:
            limit += f";t={max(0, state.reset)}"
        limits.append(limit)
    return {"RateLimit-Policy": ", ".join(policies), "RateLimit": ", ".join(limits)}
