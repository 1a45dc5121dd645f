"""The handler threads: attempts that may block run here, each with its deadline.

Attempts are started only as threads are idle (``idle``), so each starts at once: its
timeout runs from the moment its handler starts, not from its claim. A handler still
running at its deadline is given up: its attempt fails with a timeout (recorded like any
failure, retried if attempts are left), and its thread counts as busy until the handler
returns. ``running`` names the attempts whose leases must be renewed meanwhile.
Threads report through queues; everything else here is the loop thread's.
"""

from __future__ import annotations

import heapq
import itertools
import queue
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from executor_worker.claims import Attempt, Outcome
from executor_worker.jobs import HeldJob, JobState
from executor_worker.runner import AttemptRunner
from jobsvc.handlers.errors import HandlerTimeout


class HandlerPool:
    def __init__(
        self,
        *,
        concurrency: int,
        runner: AttemptRunner,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.concurrency = concurrency
        self._runner = runner
        self._clock = clock
        self._threads = ThreadPoolExecutor(concurrency, thread_name_prefix="handler")
        self._busy = 0  # attempts handed to a thread and not returned, timed out ones too
        self._running: dict[tuple[str, int], tuple[HeldJob, Attempt]] = {}
        self._deadlines: list[tuple[float, int, tuple[str, int]]] = []
        self._seq = itertools.count()
        self._started: queue.SimpleQueue[tuple[tuple[str, int], float]] = queue.SimpleQueue()
        self._finished: queue.SimpleQueue[Outcome] = queue.SimpleQueue()

    def __len__(self) -> int:
        """Attempts running (not yet finished or given up)."""
        return len(self._running)

    def idle(self) -> int:
        """Threads free for another attempt now."""
        return max(0, self.concurrency - self._busy)

    def start(self, job: HeldJob, attempt: Attempt) -> None:
        job.state = JobState.RUNNING
        self._running[job.key] = (job, attempt)
        self._busy += 1
        self._threads.submit(self._run, attempt)

    def collect(self) -> list[tuple[HeldJob, Outcome]]:
        """Attempts that finished since the last call, and those past their deadline."""
        while not self._started.empty():  # only the loop thread takes from the queues
            key, started = self._started.get_nowait()
            if key in self._running:
                deadline = started + self._running[key][1].timeout_seconds
                heapq.heappush(self._deadlines, (deadline, next(self._seq), key))
        done: list[tuple[HeldJob, Outcome]] = []
        while not self._finished.empty():
            outcome = self._finished.get_nowait()
            self._busy -= 1
            entry = self._running.pop((outcome.attempt.job_id, outcome.attempt.attempt), None)
            if entry is not None:  # None: it timed out already, and that was recorded
                done.append((entry[0], outcome))
        now = self._clock()
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, key = heapq.heappop(self._deadlines)
            entry = self._running.pop(key, None)
            if entry is not None:
                job, attempt = entry
                done.append(
                    (job, self._runner.failed(attempt, HandlerTimeout("attempt timed out")))
                )
        if len(self._deadlines) > 2 * len(self._running) + 1000:  # finished long ago
            self._deadlines = [d for d in self._deadlines if d[2] in self._running]
            heapq.heapify(self._deadlines)
        return done

    def running(self) -> dict[int, list[tuple[str, int]]]:
        """The attempts running now, by shard."""
        by_shard: dict[int, list[tuple[str, int]]] = defaultdict(list)
        for job, _ in self._running.values():
            by_shard[job.shard_id].append(job.key)
        return dict(by_shard)

    def shutdown(self) -> None:
        """Stop taking attempts; threads still running are left to finish (daemon)."""
        self._threads.shutdown(wait=False, cancel_futures=True)

    def _run(self, attempt: Attempt) -> None:
        """On a handler thread: the attempt's timeout starts now, not when it was claimed."""
        started = self._clock()
        self._started.put(((attempt.job_id, attempt.attempt), started))
        self._finished.put(self._runner.run(attempt, started=started))
