"""Race tests: calls in other threads, so in other database sessions, a transaction held
open meanwhile, and whether a session waits for a lock."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connections, transaction


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


def held_open(
    write: Callable[[], object], inside: threading.Event, release: threading.Event, *, using: str
) -> Callable[[], object]:
    """``write`` in a transaction on ``using`` that stays open, once ``write`` returned
    (``inside`` set), until ``release`` is set."""

    def run():
        with transaction.atomic(using=using):
            result = write()
            inside.set()
            assert release.wait(timeout=30)
        return result

    return run


def someone_waits_for_a_lock(alias: str) -> bool:
    """Whether a session of ``alias``'s server waits for a lock now."""
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
        return cursor.fetchone()[0] > 0
