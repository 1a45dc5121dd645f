"""Running a call in another thread, so in another database session, for race tests."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connections


def in_thread(target: Callable[[], object]) -> tuple[threading.Thread, dict]:
    """Start ``target`` in a thread; the dict gets its ``value`` or its ``error`` (for
    the test to inspect). The thread's database connections are closed when it ends."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = target()
        except Exception as exc:  # the test inspects it
            outcome["error"] = exc
        finally:
            for alias in connections:
                connections[alias].close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome
