"""When an app process of `make run` exits, restart it after a backoff, or give up.

The rule, per process name, like a process manager's (systemd's `StartLimitBurst`):

- each exit is a restart after `first_delay` seconds, doubled for every other exit of the
  same process within the last `crash_loop_window` seconds, capped at `max_delay`;
- the `crash_loop_exits`-th exit within `crash_loop_window` seconds is a crash loop: a
  restart would not help (a bad config, a server it cannot reach), so the stack stops.

A process that stays up longer than the window starts again from `first_delay`. The clock
is injected for testing; the policy starts nothing itself (the supervisor does).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

RESTART_FIRST_DELAY = 1.0  # seconds before restarting a process after its first exit
RESTART_MAX_DELAY = 8.0  # seconds: the most the doubling backoff waits
CRASH_LOOP_EXITS = 5  # exits of one process within CRASH_LOOP_WINDOW stop the stack
CRASH_LOOP_WINDOW = 60.0  # seconds


@dataclass(frozen=True)
class Restart:
    """Start the process again in `delay` seconds; this is its `number`-th restart."""

    delay: float
    number: int


@dataclass(frozen=True)
class CrashLoop:
    """The process exited `exits` times within `window` seconds: stop the stack."""

    exits: int
    window: float

    def __str__(self) -> str:
        return f"crash loop: {self.exits} exits within {self.window:.0f} s"


class RestartPolicy:
    """Decides, for each exit of a named process, between a `Restart` and a `CrashLoop`."""

    def __init__(
        self,
        *,
        first_delay: float = RESTART_FIRST_DELAY,
        max_delay: float = RESTART_MAX_DELAY,
        crash_loop_exits: int = CRASH_LOOP_EXITS,
        crash_loop_window: float = CRASH_LOOP_WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if crash_loop_exits < 1 or first_delay < 0 or max_delay < first_delay:
            raise ValueError("a restart policy needs exits >= 1 and 0 <= first <= max delay")
        self._first_delay = first_delay
        self._max_delay = max_delay
        self._crash_loop_exits = crash_loop_exits
        self._crash_loop_window = crash_loop_window
        self._clock = clock
        self._exits: dict[str, deque[float]] = {}
        self._restarts: dict[str, int] = {}

    @property
    def crash_loop_exits(self) -> int:
        return self._crash_loop_exits

    @property
    def crash_loop_window(self) -> float:
        return self._crash_loop_window

    def on_exit(self, name: str) -> Restart | CrashLoop:
        """Record that `name` exited now; say what to do about it."""
        now = self._clock()
        exits = self._exits.setdefault(name, deque())
        exits.append(now)
        while now - exits[0] > self._crash_loop_window:
            exits.popleft()
        if len(exits) >= self._crash_loop_exits:
            return CrashLoop(exits=len(exits), window=self._crash_loop_window)
        number = self._restarts.get(name, 0) + 1
        self._restarts[name] = number
        delay = min(self._first_delay * 2 ** (len(exits) - 1), self._max_delay)
        return Restart(delay=delay, number=number)
