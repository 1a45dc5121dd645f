"""A clock the test moves by hand, for code that takes a ``clock`` callable."""

from __future__ import annotations


class FakeClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now  # seconds; the test sets it

    def __call__(self) -> float:
        return self.now
