"""A job made due now does not wait for the scheduler's next poll: the API says so on the
job's shard (``store.notify_due_now``), after the commit, and the shard's scheduler,
waiting for its next round, hears it (``ShardStore.wait_for_jobs_due_now``). What it
hears while it runs a round ends its next wait at once; nothing is heard for a job due
later, which a round sends ahead of its time anyway.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connections
from django.utils import timezone

from jobsvc.jobs import store
from jobsvc.jobs.changes import job_reschedule, job_retry
from jobsvc.jobs.models import Job, JobStatus
from jobsvc.jobs.services import jobs_create
from jobsvc.jobs.specs import JobSpec, RescheduleSpec
from jobsvc.sharding.ids import shard_of
from jobsvc.sharding.shards import shard_alias, shard_aliases
from scheduler_worker.shard_store import ShardStore

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

SHARD = 1
TIMEOUT = 30.0  # seconds; a wait that hears what it awaits ends long before
MARK = "end of test"  # the payload of the test's own last notification


class ShardThread:
    """A ShardStore used on a thread of its own (its own connection), as a dispatcher's."""

    def __init__(self) -> None:
        self.store = ShardStore(alias=shard_alias(SHARD), shard_id=SHARD)
        self._calls: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def start(self, call: Callable[[ShardStore], Any]) -> queue.Queue:
        """Run ``call(store)`` on the thread; its result comes in the returned queue."""
        result: queue.Queue = queue.Queue()
        self._calls.put((call, result))
        return result

    def run(self, call: Callable[[ShardStore], Any]) -> Any:
        return self.start(call).get(timeout=TIMEOUT)

    def stop(self) -> None:
        self._calls.put(None)
        self._thread.join(TIMEOUT)

    def _serve(self) -> None:
        while (item := self._calls.get()) is not None:
            call, result = item
            result.put(call(self.store))
        connections.close_all()


@pytest.fixture
def shard_thread() -> Iterator[ShardThread]:
    thread = ShardThread()
    yield thread
    thread.stop()


def test_a_wait_for_the_next_round_ends_when_the_api_says_jobs_are_due_now(shard_thread):
    shard_thread.run(lambda s: s.listen_for_jobs_due_now())
    waiting = shard_thread.start(lambda s: s.wait_for_jobs_due_now(TIMEOUT))
    store.notify_due_now(shard_alias(SHARD))
    assert waiting.get(timeout=TIMEOUT) is True


def test_what_is_said_during_a_round_ends_the_next_wait_at_once(shard_thread):
    shard_thread.run(lambda s: s.listen_for_jobs_due_now())
    store.notify_due_now(shard_alias(SHARD))
    shard_thread.run(lambda s: s.due_users(ahead=1.0))  # a round's query
    assert shard_thread.run(lambda s: s.wait_for_jobs_due_now(TIMEOUT)) is True
    assert shard_thread.run(lambda s: s.wait_for_jobs_due_now(0)) is False  # heard once


def test_a_new_connection_hears_nothing_until_it_listens(shard_thread):
    shard_thread.run(lambda s: s.listen_for_jobs_due_now())
    shard_thread.run(lambda s: s.close())  # as after a database error
    store.notify_due_now(shard_alias(SHARD))
    assert shard_thread.run(lambda s: s.wait_for_jobs_due_now(0)) is False
    shard_thread.run(lambda s: s.listen_for_jobs_due_now())
    store.notify_due_now(shard_alias(SHARD))
    assert shard_thread.run(lambda s: s.wait_for_jobs_due_now(TIMEOUT)) is True


# --- what the API says, heard on every shard -------------------------------------------


@pytest.fixture
def heard() -> Iterator[Callable[[], dict[str, int]]]:
    """Listen on every shard as the schedulers do; the function returned counts, per
    shard, what was said there up to now (it says ``MARK`` itself, last, and reads up to it:
    notifications come in commit order)."""
    listeners = {}
    for alias in shard_aliases():
        params = connections[alias].get_connection_params()
        listener = psycopg.Connection.connect(**params, autocommit=True)
        listener.execute(f"LISTEN {store.DUE_NOW_CHANNEL}")
        listeners[alias] = listener

    def count() -> dict[str, int]:
        counts = {}
        for alias, listener in listeners.items():
            with connections[alias].cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, %s)", [store.DUE_NOW_CHANNEL, MARK])
            said = []
            for notification in listener.notifies(timeout=TIMEOUT):
                if notification.payload == MARK:
                    break
                said.append(notification)
            counts[alias] = len(said)
        return counts

    yield count
    for listener in listeners.values():
        listener.close()


def _spec(due_in: timedelta) -> JobSpec:
    return JobSpec(
        message="wake", execute_at=timezone.now() + due_in, max_attempts=1, timeout_seconds=30.0
    )


def _alias(job_id: str) -> str:
    return shard_alias(shard_of(job_id))


def test_a_job_created_due_now_is_said_on_its_shard_alone(make_user, heard):
    [job] = jobs_create(user_id=make_user().pk, specs=[_spec(timedelta(0))], is_bulk=False).jobs
    counts = heard()
    assert counts[_alias(job.id)] == 1
    assert sum(counts.values()) == 1


def test_a_bulk_spread_over_the_shards_is_said_once_on_each_shard_given_jobs_due_now(
    make_user, heard
):
    """Only the first shard gets a job due now; the later ones are due in an hour."""
    later = [_spec(timedelta(hours=1)) for _ in range(settings.BULK_SPREAD_MIN_JOBS - 1)]
    jobs = jobs_create(user_id=make_user().pk, specs=[_spec(timedelta(0)), *later], is_bulk=True)
    counts = heard()
    assert len({_alias(job.id) for job in jobs.jobs}) > 1, "spread over the shards"
    assert counts == {alias: int(alias == _alias(jobs.jobs[0].id)) for alias in counts}


def test_nothing_is_said_for_jobs_due_later(make_user, heard):
    user = make_user()
    [job] = jobs_create(user_id=user.pk, specs=[_spec(timedelta(hours=1))], is_bulk=False).jobs
    later = RescheduleSpec(execute_at=timezone.now() + timedelta(hours=2), message=None)
    job_reschedule(user_id=user.pk, job_id=job.id, change=later)
    assert sum(heard().values()) == 0


def test_a_job_rescheduled_to_now_or_retried_is_said_on_its_shard(make_user, heard):
    user = make_user()
    jobs = jobs_create(
        user_id=user.pk, specs=[_spec(timedelta(hours=1)) for _ in range(2)], is_bulk=True
    ).jobs
    heard()  # nothing for those
    rescheduled, retried = jobs[0].id, jobs[1].id
    now = RescheduleSpec(execute_at=timezone.now(), message=None)
    job_reschedule(user_id=user.pk, job_id=rescheduled, change=now)
    assert heard()[_alias(rescheduled)] == 1
    Job.objects.using(_alias(retried)).filter(pk=retried).update(
        status=JobStatus.FAILED, attempts=1
    )
    job_retry(user_id=user.pk, job_id=retried, extra_attempts=1)
    assert heard()[_alias(retried)] == 1
