"""When to retry a failed job attempt: exponential backoff with "equal" jitter.

The n-th retry (n = 1 after the first attempt failed) waits a random time in
``[c / 2, c]`` where ``c = min(cap, base * 2 ** (n - 1))``.

Why equal jitter rather than full jitter (``[0, c]``): jobs that fail together (a
receiver went down) must not come back together, and both spread them over a window that
doubles each time. Full jitter, though, sometimes retries almost at once, which for an
endpoint that just failed is mostly a wasted attempt out of a small ``max_attempts``
budget. Equal jitter keeps half the window as a floor, so the spread is a little
narrower but no retry comes sooner than half its exponential delay. Randomness is
injected (``rng``) for tests.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from jobsvc.handlers.errors import PermanentError

# 2 ** 1000 times any sane base is far above any cap; larger exponents would overflow.
_MAX_EXPONENT = 1000

_default_rng = random.Random()


def retry_delay(
    *, attempt: int, base: float, cap: float, rng: random.Random | None = None
) -> float:
    """Seconds to wait before retry number ``attempt`` (1 = the first retry)."""
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    if not (math.isfinite(base) and base >= 0):
        raise ValueError(f"base must be a finite number >= 0, got {base}")
    if not (math.isfinite(cap) and cap >= 0):
        raise ValueError(f"cap must be a finite number >= 0, got {cap}")
    ceiling = min(cap, base * 2.0 ** min(attempt - 1, _MAX_EXPONENT))
    half = ceiling / 2
    # half + half * [0, 1) can round up to just above ceiling; never return more than it.
    return min(ceiling, half + half * (rng or _default_rng).random())


@dataclass(frozen=True)
class RetryPolicy:
    """How often, and how far apart, a job's attempts are made.

    ``max_attempts`` counts every attempt, the first included: 1 means never retry.
    """

    max_attempts: int
    base_delay: float  # seconds; the first retry waits between base/2 and base
    max_delay: float  # seconds; no retry waits longer

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if not (math.isfinite(self.base_delay) and self.base_delay >= 0):
            raise ValueError(f"base_delay must be a finite number >= 0, got {self.base_delay}")
        if not (math.isfinite(self.max_delay) and self.max_delay >= self.base_delay):
            raise ValueError(f"max_delay must be finite and >= base_delay, got {self.max_delay}")

    def should_retry(self, attempt: int, error: BaseException) -> bool:
        """Whether attempt number ``attempt``, which failed with ``error``, gets another."""
        if isinstance(error, PermanentError):
            return False
        return attempt < self.max_attempts

    def next_delay(self, attempt: int, *, rng: random.Random | None = None) -> float:
        """Seconds to wait after attempt number ``attempt`` failed, before the next one."""
        return retry_delay(attempt=attempt, base=self.base_delay, cap=self.max_delay, rng=rng)
