"""Executors that die or are stopped while jobs run: no job is lost or finished twice.

Timings are the e2e FAST_TIMINGS: a running attempt's lease is 2 s (renewed while it runs),
the sweeper looks every 0.5 s, and an executor gets 5 s to drain at SIGTERM.
"""

from __future__ import annotations

import re
import signal
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from django.conf import settings
from django.db import connections

from jobsvc.env import env_database_urls
from jobsvc.jobs.models import JobAttempt
from jobsvc.sharding.ids import shard_of
from jobsvc.sharding.shards import shard_alias, shard_aliases
from scheduler_worker.queries import LOST_ATTEMPT_ERROR
from tests.e2e.conftest import FAST_TIMINGS, JOBS_PARTITIONS, Messaging
from tests.e2e.jobs import all_jobs, create, due_in, spec, status_counts
from tests.waiting import wait_until
from tools.bench.processes import WorkerProcess

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

RUN_TIMEOUT = 30.0  # seconds for workers to start, or a lost attempt to be run again
DRAIN_TIMEOUT = float(FAST_TIMINGS["JOBSVC_EXECUTOR_DRAIN_TIMEOUT_SECONDS"])

_PARTITION_EVENT = re.compile(r"(assigned|revoking) partitions \[([\d, ]*)\] of (\S+)")


def assignment(worker: WorkerProcess, topic: str) -> set[int]:
    """The partitions of ``topic`` an executor holds now, as its log tells."""
    held: set[int] = set()
    for event, numbers, of in _PARTITION_EVENT.findall(worker.log()):
        if of != topic:
            continue
        partitions = {int(n) for n in numbers.split(",") if n.strip()}
        held = held | partitions if event == "assigned" else held - partitions
    return held


def partition_of(messaging: Messaging, job_id: str, *, timeout: float = 10.0) -> tuple[str, int]:
    """The topic and partition a scheduler published the job's message to."""
    topics = {messaging.jobs_topic: JOBS_PARTITIONS}
    consumer = Consumer(
        {
            "bootstrap.servers": settings.KAFKA_BOOTSTRAP,
            "group.id": f"partition-finder-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign(
            [
                TopicPartition(topic, p, OFFSET_BEGINNING)
                for topic, partitions in topics.items()
                for p in range(partitions)
            ]
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            record = consumer.poll(0.2)
            if record is not None and record.error() is None and record.key() == job_id.encode():
                return record.topic(), record.partition()
        raise AssertionError(f"no message of job {job_id} on {', '.join(topics)}")
    finally:
        consumer.close()


def job(job_id: str):
    return all_jobs(pk=job_id)[0]


def test_a_job_whose_executor_is_killed_mid_run_runs_again_elsewhere_and_succeeds(
    make_user, start_worker, receiver, messaging
):
    start_worker("scheduler", "scheduler-a")
    executors = [start_worker("executor", name) for name in ("executor-a", "executor-b")]
    topic = messaging.jobs_topic
    wait_until(
        lambda: (
            all(assignment(e, topic) for e in executors)
            and assignment(executors[0], topic) | assignment(executors[1], topic)
            == set(range(JOBS_PARTITIONS))
        ),
        timeout=RUN_TIMEOUT,
        what="both executors hold partitions",
    )
    user = make_user()
    # The first delivery stalls past the job's timeout: it cannot succeed before the kill.
    [job_id] = create(
        user.pk, [spec(handler="http", params={"url": receiver.url}, timeout_seconds=3)]
    )
    receiver.stall(job_id, 5.0)

    wait_until(lambda: job(job_id).status == "running", timeout=RUN_TIMEOUT, what="job started")
    topic, partition = partition_of(messaging, job_id)
    [running] = [e for e in executors if partition in assignment(e, topic)]
    [survivor] = [e for e in executors if e is not running]
    running.kill()
    receiver.stall(job_id, 0.0)  # the next attempt is answered at once

    wait_until(lambda: job(job_id).status == "succeeded", timeout=RUN_TIMEOUT, what="rerun")
    wait_until(lambda: len(receiver.of(job_id)) == 2, timeout=10, what="the stalled delivery")

    done = job(job_id)
    assert done.attempts == 2
    assert [(e["attempt"], e["error"]) for e in done.attempt_errors] == [(1, LOST_ATTEMPT_ERROR)]
    history = JobAttempt.objects.using(shard_alias(shard_of(job_id))).filter(job_id=job_id)
    assert sorted((a.attempt, a.outcome, a.http_status) for a in history) == [
        (1, "lost", None),
        (2, "succeeded", 200),
    ]
    # The re-run is attempt 2 under the job's one key: the receiver can drop it if the
    # dead attempt's delivery had its effect.
    assert sorted(d.attempt for d in receiver.of(job_id)) == [1, 2]
    assert {d.idempotency_key for d in receiver.of(job_id)} == {job_id}
    assert survivor.alive()


def test_sigterm_finishes_running_jobs_and_hands_the_rest_to_the_group(
    make_user, start_worker, receiver
):
    """The first executor holds at most 4 attempts; the rest wait on the topic for it."""
    user = make_user()
    ids = create(user.pk, [spec(handler="http", params={"url": receiver.url}) for _ in range(30)])
    for job_id in ids:
        receiver.stall(job_id, 0.3)
    start_worker("scheduler", "scheduler-a")
    first = start_worker(
        "executor",
        "executor-a",
        env={"JOBSVC_EXECUTOR_MAX_IN_FLIGHT": "4", "JOBSVC_EXECUTOR_CONCURRENCY": "4"},
    )
    wait_until(lambda: status_counts()["running"] > 0, timeout=RUN_TIMEOUT, what="jobs running")

    first.send(signal.SIGTERM)

    assert first.process.wait(timeout=DRAIN_TIMEOUT + 10) == 0
    assert "executor executor-a stopped" in first.log()
    counts = status_counts()
    assert counts["running"] == 0  # everything it started was finished and recorded
    assert 0 < counts["succeeded"] < len(ids)
    start_worker("executor", "executor-b")
    wait_until(
        lambda: status_counts()["succeeded"] == len(ids), timeout=RUN_TIMEOUT, what="all ran"
    )
    assert receiver.count_by_job() == dict.fromkeys(ids, 1)
    assert {job.attempts for job in all_jobs()} == {1}


def test_a_job_still_running_when_the_drain_ends_is_handed_back(make_user, start_worker, receiver):
    user = make_user()
    [slow] = create(
        user.pk, [spec(handler="http", params={"url": receiver.url}, timeout_seconds=3)]
    )
    receiver.stall(slow, 2.0)
    start_worker("scheduler", "scheduler-a")
    first = start_worker(
        "executor", "executor-a", env={"JOBSVC_EXECUTOR_DRAIN_TIMEOUT_SECONDS": "0.5"}
    )
    wait_until(lambda: job(slow).status == "running", timeout=RUN_TIMEOUT, what="job started")

    first.send(signal.SIGTERM)

    assert first.process.wait(timeout=RUN_TIMEOUT) == 0
    assert "attempts still running at shutdown" in first.log()
    receiver.stall(slow, 0.0)
    start_worker("executor", "executor-b")
    wait_until(lambda: job(slow).status == "succeeded", timeout=RUN_TIMEOUT, what="rerun")
    assert job(slow).attempts == 2
    wait_until(lambda: len(receiver.of(slow)) == 2, timeout=10, what="both deliveries")
    assert sorted(d.attempt for d in receiver.of(slow)) == [1, 2]
    assert {d.idempotency_key for d in receiver.of(slow)} == {slow}


def _tagged_database_urls(application_name: str) -> str:
    """The shard URLs with ``application_name`` set, to find that worker's sessions."""
    return ",".join(
        f"{url}{'&' if '?' in url else '?'}application_name={application_name}"
        for url in env_database_urls("JOBSVC_SHARD_DB_URLS", "")
    )


def _open_transactions(application_name: str) -> int:
    """Sessions of that name inside a transaction, over every shard."""
    count = 0
    for alias in shard_aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                " AND datname = current_database() AND xact_start IS NOT NULL",
                [application_name],
            )
            count += cursor.fetchone()[0]
    return count


def _freeze_inside_a_transaction(worker: WorkerProcess, name: str, *, tries: int = 200) -> bool:
    """SIGSTOP the worker while one of its sessions is inside a transaction: True once
    it is stopped so (a stopped client's transaction cannot end by itself)."""
    for _ in range(tries):
        wait_until(lambda: _open_transactions(name) > 0, timeout=RUN_TIMEOUT, what="a claim")
        worker.pause()
        if _open_transactions(name) > 0:
            return True
        worker.resume()  # it committed in between: try again
    return False


FROZEN_FLOOD = 6000  # no-op jobs: both executors claim batches of them back to back


def test_an_executor_frozen_inside_a_claim_does_not_stall_the_other(
    make_user, start_worker, messaging
):
    """A paused process (SIGSTOP, a GC pause, a stopped VM) that claimed jobs holds their
    rows locked. Once the consumer group gives its partitions to the other executor, that
    one claims the same jobs: it must get them, and every job must run, while the frozen
    executor stays frozen."""
    start_worker("scheduler", "scheduler-a")
    frozen = start_worker(
        "executor",
        "executor-a",
        env={"JOBSVC_SHARD_DB_URLS": _tagged_database_urls("executor-a")},
    )
    survivor = start_worker("executor", "executor-b")
    topic = messaging.jobs_topic
    wait_until(
        lambda: assignment(frozen, topic) and assignment(survivor, topic),
        timeout=RUN_TIMEOUT,
        what="both executors hold partitions",
    )
    user = make_user()
    ids = create(user.pk, [spec(due=due_in(1.0)) for _ in range(FROZEN_FLOOD)])

    assert _freeze_inside_a_transaction(frozen, "executor-a"), "never caught inside a claim"
    wait_until(
        lambda: status_counts()["succeeded"] == len(ids),
        timeout=60,
        what="every job ran while one executor stayed frozen",
    )
    frozen.resume()

    assert {job.attempts for job in all_jobs()} == {1}
    assert frozen.alive() and survivor.alive()
