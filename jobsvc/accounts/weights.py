"""Bounds of a user's ``job_weight``: the one rule every path that sets a weight applies.

A weight is the user's share of dispatch capacity, relative to other users. The fair
order divides by it, so a tiny weight (1e-300) or a huge one makes every other user's
share vanish in floating point, and a non-finite one breaks the order outright. So a
weight is a finite number between ``JOBSVC_MIN_JOB_WEIGHT`` and ``JOBSVC_MAX_JOB_WEIGHT``
(settings), which must themselves lie within the hard bounds below; the database refuses
a row outside the hard bounds (the ``accounts_user_job_weight_bounds`` constraint).

Plain Python: ``jobsvc.settings`` reads the hard bounds from here.
"""

from __future__ import annotations

import math

JOB_WEIGHT_FLOOR = 0.001  # the smallest weight any deployment may allow
JOB_WEIGHT_CEILING = 1_000_000.0  # the largest


def job_weight_problem(value: object, *, minimum: float, maximum: float) -> str | None:
    """Why ``value`` is not an acceptable weight within [minimum, maximum], or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "Must be a number."
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or not minimum <= number <= maximum:
        return f"Must be a finite number from {minimum:g} to {maximum:g}."
    return None
