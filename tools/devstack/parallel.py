"""Running a few independent start or stop steps at once, to save wall time."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence


def run_in_parallel(tasks: Sequence[tuple[str, Callable[[], None]]]) -> None:
    """Run each `(name, task)` in its own thread; raise the first error once all are done.

    All tasks run to their end even when the caller is interrupted (a Ctrl-C while servers
    start): each is bounded by its own deadline, and the caller's clean-up must see every
    process that was started.
    """
    errors: list[BaseException] = []

    def capture(task: Callable[[], None]) -> None:
        try:
            task()
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=capture, args=(task,), name=f"localstack-{name}", daemon=True)
        for name, task in tasks
    ]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    finally:
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]
