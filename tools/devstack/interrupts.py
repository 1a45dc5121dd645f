"""SIGINT and SIGTERM for the launcher: the first one unwinds it, later ones must wait.

The first signal raises `Interrupted` in the main thread, so the launcher's `finally`
blocks stop the stack. Once teardown has begun (`shield`), further signals only print a
line: stopping PostgreSQL half way would cost a crash recovery on the next start.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType

SIGNALS = (signal.SIGINT, signal.SIGTERM)

Handler = Callable[[int, FrameType | None], None]


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived (a BaseException, so `except Exception` lets it through)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class SignalGuard:
    """Installs the launcher's signal handlers for the duration of a `with` block."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> SignalGuard:
        self._previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
        self._install(self._raise_once)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]

    def shield(self) -> None:
        """From now on signals are only acknowledged: teardown runs to its end."""
        self._install(self._acknowledge)

    @contextmanager
    def redirected(self, handler: Handler) -> Iterator[None]:
        """Use `handler` inside the block (e.g. to forward signals to a child)."""

        def recording(signum: int, frame: FrameType | None) -> None:
            self.received = self.received or signum
            handler(signum, frame)

        self._install(recording)
        try:
            yield
        finally:
            self._install(self._raise_once if self.received is None else self._acknowledge)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Inside the block a signal is only recorded; it raises `Interrupted` at the end.

        For a step that must not be cut in half, such as starting a process that the
        teardown must know about in order to stop it.
        """
        arrived: list[int] = []
        after = self._raise_once if self.received is None else self._acknowledge
        self._install(lambda signum, frame: arrived.append(signum))
        try:
            yield
        finally:
            self._install(after)
        if arrived and after == self._raise_once:
            self._raise_once(arrived[0], None)

    def _raise_once(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum
        self.shield()
        raise Interrupted(signum)

    def _acknowledge(self, signum: int, frame: FrameType | None) -> None:
        # os.write, not logging: a handler must not take locks the main thread may hold.
        name = signal.Signals(signum).name
        os.write(2, f"\n{name} received: stopping, please wait...\n".encode())

    @staticmethod
    def _install(handler: Handler) -> None:
        for signum in SIGNALS:
            signal.signal(signum, handler)
