"""One load-generator run: sender threads create jobs at a paced rate, the calling thread
observes once a second and prints a line, and the run ends with a ``Summary``.

Phases: *creating* (``duration`` seconds of request slots), then *draining* (observing
only, until every created job is terminal or ``drain`` seconds have passed), then the
summary. ``stop()`` (or Ctrl-C, a KeyboardInterrupt in the observing thread) ends the
run early; the summary still covers everything seen so far.

Shutdown order: the stop event first (senders finish their current request and leave,
the observer stops looking), then the senders are joined with a bound, so a request
stuck in a dead connection cannot hold the summary back.
"""

from __future__ import annotations

import random
import threading
import time
from array import array
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from tools.loadgen import stats
from tools.loadgen.client import ApiClient, ConnectionFailed
from tools.loadgen.errors import LoadgenError
from tools.loadgen.pacing import Pacer
from tools.loadgen.tracker import JobTracker, Lookup, Observation
from tools.loadgen.users import RunUser

OBSERVE_INTERVAL_SECONDS = 1.0
SENDER_JOIN_SECONDS = 5.0  # after stop, for all senders: a request in flight may finish
CREATE_PATH = "/api/v1/me/jobs"


@dataclass(frozen=True)
class LoadConfig:
    api: str  # base URL, e.g. http://127.0.0.1:8000
    users: int
    weights: tuple[float, ...]  # cycled over the users
    rate: float  # jobs per second, all users together
    horizon: float  # seconds: execute_at is uniform in [now + lead, now + lead + horizon]
    bulk: int  # jobs per request (1: a single-job request, not a list)
    duration: float  # seconds of creating
    concurrency: int  # sender threads, each with one keep-alive connection
    drain: float  # seconds to keep observing after creating, at most
    message: str = "loadgen"
    lead: float = 0.0  # seconds from sending a job to the earliest it may be due

    def validate(self) -> None:
        checks = (
            (self.users >= 1, "--users must be at least 1"),
            (self.rate > 0, "--rate must be positive"),
            (self.horizon >= 0, "--horizon must not be negative"),
            (self.lead >= 0, "--lead must not be negative"),
            (self.bulk >= 1, "--bulk must be at least 1"),
            (self.duration > 0, "--duration must be positive"),
            (self.concurrency >= 1, "--concurrency must be at least 1"),
            (self.drain >= 0, "--drain must not be negative"),
        )
        for ok, message in checks:
            if not ok:
                raise LoadgenError(message)


class _SendStats:
    """Counters the senders update and the observer reads, under one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = 0
        self.created = 0
        self.errors: Counter[str] = Counter()
        self.latency = array("d")  # seconds, successful requests
        self._second_created = 0
        self._second_errors = 0

    def success(self, jobs: int, seconds: float) -> None:
        with self._lock:
            self.requests += 1
            self.created += jobs
            self._second_created += jobs
            self.latency.append(seconds)

    def failure(self, kind: str) -> None:
        with self._lock:
            self.requests += 1
            self.errors[kind] += 1
            self._second_errors += 1

    def take_second(self) -> tuple[int, int]:
        """Jobs created and requests failed since the last call."""
        with self._lock:
            taken = self._second_created, self._second_errors
            self._second_created = self._second_errors = 0
            return taken


class LoadGenerator:
    def __init__(
        self,
        *,
        config: LoadConfig,
        users: list[RunUser],
        lookup: Lookup,
        shard_of: Callable[[str], int],
        write: Callable[[str], None] = print,
        rng: random.Random | None = None,  # draws each execute_at within the horizon
    ) -> None:
        config.validate()
        self.config = config
        self.users = users
        self._lookup = lookup
        self._write = write
        self._tracker = JobTracker(shard_of=shard_of)
        self._sent = _SendStats()
        self._stopped = threading.Event()
        self._random = rng or random.Random()

    def stop(self) -> None:
        """End the run early; idempotent and safe from a signal handler."""
        self._stopped.set()

    def run(self) -> stats.Summary:
        started = time.monotonic()
        pacer = Pacer.for_rate(
            jobs_per_second=self.config.rate,
            jobs_per_request=self.config.bulk,
            start=started,
            duration=self.config.duration,
            clock=time.monotonic,
        )
        senders = [
            # Daemons: a request stuck past the join bound must not keep the process alive.
            threading.Thread(
                target=self._send_loop, args=(pacer,), name=f"loadgen-send-{n}", daemon=True
            )
            for n in range(self.config.concurrency)
        ]
        for sender in senders:
            sender.start()
        totals = _Totals(started)
        interrupted = False
        try:
            creating_ended = self._observe_until_done(started, senders, totals)
        except KeyboardInterrupt:
            interrupted = True
            creating_ended = time.monotonic()
        finally:
            self._stopped.set()
            join_until = time.monotonic() + SENDER_JOIN_SECONDS
            for sender in senders:
                sender.join(timeout=max(0.0, join_until - time.monotonic()))
        interrupted = interrupted or totals.stopped_early
        # Jobs that fell due since the last look count as due and unfinished.
        self._tracker.move_due(time.time())
        return self._summary(
            totals,
            seconds=max(totals.last_observation, creating_ended) - started,
            creating=min(creating_ended, started + self.config.duration) - started,
            interrupted=interrupted,
            dropped=pacer.dropped,
        )

    # --- observing ----------------------------------------------------------------------

    def _observe_until_done(
        self, started: float, senders: list[threading.Thread], totals: _Totals
    ) -> float:
        """Observe once a second; return when creating ended (monotonic)."""
        creating_ended: float | None = None
        previous = next_tick = started
        while True:
            next_tick = max(next_tick + OBSERVE_INTERVAL_SECONDS, previous)
            if self._stopped.wait(max(0.0, next_tick - time.monotonic())):
                totals.stopped_early = True
                return creating_ended or time.monotonic()
            now = time.monotonic()
            if creating_ended is None and not any(sender.is_alive() for sender in senders):
                creating_ended = now
            if self._observe_once(started=started, previous=previous, now=now, totals=totals):
                previous = now
            if creating_ended is not None and (
                self._tracker.tracked == 0 or now - creating_ended >= self.config.drain
            ):
                return creating_ended

    def _observe_once(
        self, *, started: float, previous: float, now: float, totals: _Totals
    ) -> bool:
        """One line; False if the shards could not be read (the next line covers both)."""
        try:
            seen = self._tracker.observe(now=time.time(), lookup=self._lookup)
        except LoadgenError as exc:
            self._write(f"observation failed: {exc}")
            return False
        created, errors = self._sent.take_second()
        totals.add(seen)
        totals.last_observation = now
        second = stats.Second(
            t=round(now - started),
            created=created,
            dispatched=seen.dispatched,
            executed=seen.executed,
            backlog=self._tracker.backlog,
            started_lateness=seen.started_lateness,
            finished_lateness=seen.finished_lateness,
            errors=errors,
            seconds=now - previous,
        )
        if len(totals.series) % stats.HEADER_EVERY == 0:
            self._write(stats.header())
        self._write(stats.line(second))
        totals.series.append(second.as_dict())
        return True

    # --- sending ------------------------------------------------------------------------

    def _send_loop(self, pacer: Pacer) -> None:
        client = ApiClient(self.config.api)
        try:
            while not self._stopped.is_set():
                slot = pacer.next_slot()
                if slot is None:
                    return
                delay = slot.at - time.monotonic()
                if delay > 0 and self._stopped.wait(delay):
                    return
                self._send(client, self.users[slot.sequence % len(self.users)])
        finally:
            client.close()

    def _send(self, client: ApiClient, user: RunUser) -> None:
        now = time.time()
        earliest = now + self.config.lead
        due = [
            earliest + self._random.uniform(0, self.config.horizon) for _ in range(self.config.bulk)
        ]
        jobs = [{"message": self.config.message, "execute_at": _iso(at)} for at in due]
        payload = jobs if self.config.bulk > 1 else jobs[0]
        try:
            response = client.post(CREATE_PATH, payload, token=user.token)
        except ConnectionFailed:
            self._sent.failure("connection")
            return
        if not response.ok:
            self._sent.failure(f"HTTP {response.status}")
            return
        data = response.body.get("data") if isinstance(response.body, dict) else None
        created = data if isinstance(data, list) else [data]
        if len(created) != len(due) or not all(
            isinstance(job, dict) and "id" in job for job in created
        ):
            self._sent.failure(f"HTTP {response.status} without the jobs")
            return
        self._tracker.add(zip((job["id"] for job in created), due, strict=True))
        self._sent.success(len(created), response.seconds)

    # --- the end ------------------------------------------------------------------------

    def _summary(
        self, totals: _Totals, *, seconds: float, creating: float, interrupted: bool, dropped: int
    ) -> stats.Summary:
        return stats.Summary(
            config=asdict(self.config),
            seconds=max(seconds, 0.0),
            creating_seconds=max(creating, 0.0),
            requests=self._sent.requests,
            created=self._sent.created,
            dispatched=totals.dispatched,
            statuses=dict(totals.statuses),
            unfinished_due=self._tracker.backlog,
            not_yet_due=self._tracker.not_yet_due,
            started_lateness=totals.started_lateness,
            finished_lateness=totals.finished_lateness,
            request_latency=self._sent.latency,
            errors=dict(self._sent.errors),
            dropped_slots=dropped,
            interrupted=interrupted,
            series=totals.series,
        )


class _Totals:
    """What the observations saw, summed over the run."""

    def __init__(self, started: float) -> None:
        self.dispatched = 0
        self.statuses: Counter[str] = Counter()
        self.started_lateness = array("d")
        self.finished_lateness = array("d")
        self.series: list[dict] = []
        self.last_observation = started
        self.stopped_early = False

    def add(self, seen: Observation) -> None:
        self.dispatched += seen.dispatched
        self.statuses.update(seen.statuses)
        self.started_lateness.extend(seen.started_lateness)
        self.finished_lateness.extend(seen.finished_lateness)


def _iso(unix_seconds: float) -> str:
    return datetime.fromtimestamp(unix_seconds, UTC).isoformat(timespec="microseconds")
