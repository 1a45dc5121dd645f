"""ShardStore against a real shard: the lease epoch fences every write (and an owner frozen
inside one does not lock the next owner out), claims follow the quotas and the due order,
finding due users and claiming read indexes only, and the sweeper recovers jobs stuck
between states.

Tests commit (``transaction=True``) as the scheduler does, so ``now()`` moves between
statements; times are therefore compared with margins of minutes, never exactly.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TypeVar

import pytest
from django.db import DatabaseError, connections
from django.utils import timezone

from jobsvc.jobs import store
from jobsvc.jobs.models import IdempotencyKey, Job, ShardLease
from jobsvc.jobs.specs import JobSpec
from jobsvc.sharding.ids import new_job_id
from jobsvc.sharding.shards import shard_alias
from scheduler_worker import queries
from scheduler_worker.errors import ShardFenced
from scheduler_worker.shard_store import (
    IDLE_IN_TRANSACTION_TIMEOUT,
    AbandonedJob,
    ShardStore,
    picked_hand,
)
from tests.integration.plans import explain, rows_read, scans_of_jobs
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)

T = TypeVar("T")

SHARD = 2
ALIAS = shard_alias(SHARD)
QUEUED_TIMEOUT = 90.0  # seconds a claimed job's lease lasts in these tests
EXPIRED = timedelta(minutes=-1)  # a lease that ran out a minute ago
VALID = timedelta(hours=1)  # a lease with an hour left


@pytest.fixture
def shard() -> Iterator[ShardStore]:
    shard_store = ShardStore(alias=ALIAS, shard_id=SHARD)
    yield shard_store
    shard_store.close()


def _jobs(
    user_id: int,
    *due_in_minutes: float,
    status: str = "scheduled",
    attempts: int = 0,
    max_attempts: int = 3,
    lease: timedelta | None = None,
) -> list[str]:
    """Insert one job per due time (minutes from now, negative: overdue); return their ids."""
    now = timezone.now()
    rows = []
    for minutes in due_in_minutes:
        spec = JobSpec(
            message=f"due in {minutes} min",
            execute_at=now + timedelta(minutes=minutes),
            max_attempts=max_attempts,
            timeout_seconds=30.0,
            handler="http",
            handler_params={"url": "https://example.com/hook"},
        )
        job_id = new_job_id(shard_id=SHARD, at=now)
        rows.append(
            store.new_job_row(job_id=job_id, user_id=user_id, spec=spec, shard_id=SHARD, now=now)
        )
    store.insert_jobs(ALIAS, rows)
    ids = [row.id for row in rows]
    if status != "scheduled" or attempts:
        Job.objects.using(ALIAS).filter(pk__in=ids).update(
            status=status,
            attempts=attempts,
            lease_expires_at=None if lease is None else now + lease,
        )
    return ids


def _snapshot() -> list[tuple]:
    return list(
        Job.objects.using(ALIAS)
        .order_by("pk")
        .values_list(
            "pk", "status", "due_at", "attempts", "dispatch_epoch", "lease_expires_at", "updated_at"
        )
    )


def _job(job_id: str) -> Job:
    return Job.objects.using(ALIAS).get(pk=job_id)


# --- the lease ------------------------------------------------------------------------


def test_acquiring_the_lease_bumps_the_epoch_and_records_the_owner(shard):
    first = shard.acquire_lease(owner="worker-a")
    second = shard.acquire_lease(owner="worker-b")

    assert second == first + 1
    lease = ShardLease.objects.using(ALIAS).get(pk=SHARD)
    assert (lease.epoch, lease.owner) == (second, "worker-b")
    assert lease.acquired_at is not None


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(
            lambda shard, epoch, ids: shard.claim(
                epoch=epoch, quotas={7: 10}, queued_timeout=QUEUED_TIMEOUT
            ),
            id="claim",
        ),
        pytest.param(
            lambda shard, epoch, ids: shard.release(epoch=epoch, job_ids=ids["queued"]),
            id="release",
        ),
        pytest.param(lambda shard, epoch, ids: shard.sweep(epoch=epoch), id="sweep"),
        pytest.param(
            lambda shard, epoch, ids: shard.fail_abandoned(epoch=epoch, dead_letter=lambda _: True),
            id="fail_abandoned",
        ),
    ],
)
def test_a_write_under_an_old_epoch_is_fenced_and_changes_nothing(shard, write):
    old = shard.acquire_lease(owner="worker-a")
    ids = {
        "due": _jobs(7, -3, -2, -1),
        "queued": _jobs(7, -5, status="queued", lease=EXPIRED),
        "running": _jobs(7, -5, status="running", attempts=1, lease=EXPIRED),
        "exhausted": _jobs(7, -5, status="running", attempts=3, max_attempts=3, lease=EXPIRED),
    }
    Job.objects.using(ALIAS).filter(pk__in=ids["queued"]).update(dispatch_epoch=old)
    shard.acquire_lease(owner="worker-b")
    before = _snapshot()

    with pytest.raises(ShardFenced):
        write(shard, old, ids)

    assert _snapshot() == before


def test_every_write_is_fenced_while_no_lease_was_taken(shard):
    _jobs(7, -1)
    before = _snapshot()

    with pytest.raises(ShardFenced):
        shard.claim(epoch=1, quotas={7: 10}, queued_timeout=QUEUED_TIMEOUT)

    assert _snapshot() == before


def test_a_new_owner_does_not_release_jobs_the_old_owner_claimed(shard):
    old = shard.acquire_lease(owner="worker-a")
    [job_id] = _jobs(7, -1)
    shard.claim(epoch=old, quotas={7: 1}, queued_timeout=QUEUED_TIMEOUT)
    new = shard.acquire_lease(owner="worker-b")

    assert shard.release(epoch=new, job_ids=[job_id]) == 0
    assert _job(job_id).status == "queued"


# --- claims ---------------------------------------------------------------------------


def test_claim_takes_each_users_oldest_due_jobs_up_to_its_quota(shard):
    epoch = shard.acquire_lease(owner="worker-a")
    # Created newest-due first, so id order and due order disagree.
    heavy = _jobs(1, -1, -2, -3, -4, -5)
    heavy_future = _jobs(1, 10, 20)
    light = _jobs(2, -30, -20, -10)
    unallocated = _jobs(3, -60, -50)

    claimed = shard.claim(epoch=epoch, quotas={1: 3, 2: 5, 3: 0}, queued_timeout=QUEUED_TIMEOUT)

    assert Counter(job.user_id for job in claimed) == {1: 3, 2: 3}
    assert {job.job_id for job in claimed} == {*heavy[2:], *light}
    oldest_due = [job.due_at for job in claimed if job.user_id == 1]
    assert max(oldest_due) < min(_job(job_id).due_at for job_id in heavy[:2])
    for job_id in heavy[:2] + heavy_future + unallocated:
        assert _job(job_id).status == "scheduled"
    now = timezone.now()
    for job in claimed:
        stored = _job(job.job_id)
        assert (stored.status, stored.dispatch_epoch, job.attempts) == ("queued", epoch, 0)
        assert stored.dispatched_at == job.dispatched_at
        assert job.due_at == stored.due_at <= job.dispatched_at <= now
        assert stored.lease_expires_at == pytest.approx(
            job.dispatched_at + timedelta(seconds=QUEUED_TIMEOUT), abs=timedelta(seconds=1)
        )


def test_claim_never_takes_a_job_before_it_is_due(shard):
    epoch = shard.acquire_lease(owner="worker-a")
    future = _jobs(1, 1, 5, 60)

    assert shard.claim(epoch=epoch, quotas={1: 100}, queued_timeout=QUEUED_TIMEOUT) == []
    assert {_job(job_id).status for job_id in future} == {"scheduled"}


def test_claim_ahead_takes_jobs_due_within_that_time_and_their_lease_runs_from_due(shard):
    epoch = shard.acquire_lease(owner="worker-a")
    overdue = _jobs(1, -1)
    soon = _jobs(1, 2, 4)  # due within five minutes
    later = _jobs(1, 6, 60)

    claimed = shard.claim(epoch=epoch, quotas={1: 100}, queued_timeout=QUEUED_TIMEOUT, ahead=5 * 60)

    assert {job.job_id for job in claimed} == {*overdue, *soon}
    assert {_job(job_id).status for job_id in later} == {"scheduled"}
    for job_id in soon:  # not swept back while it waits for its time in an executor
        stored = _job(job_id)
        assert stored.lease_expires_at == pytest.approx(
            stored.due_at + timedelta(seconds=QUEUED_TIMEOUT), abs=timedelta(seconds=1)
        )


def test_due_users_ahead_include_users_whose_first_job_is_due_within_that_time(shard):
    _jobs(11, -1)
    _jobs(12, 2, 30)
    _jobs(13, 6)

    assert shard.due_users(ahead=5 * 60) == [11, 12]


def test_claim_skips_jobs_that_are_no_longer_scheduled(shard):
    epoch = shard.acquire_lease(owner="worker-a")
    _jobs(1, -5, status="queued", lease=VALID)
    _jobs(1, -4, status="running", attempts=1, lease=VALID)
    _jobs(1, -3, status="cancelled")
    [due] = _jobs(1, -1)

    claimed = shard.claim(epoch=epoch, quotas={1: 10}, queued_timeout=QUEUED_TIMEOUT)

    assert [job.job_id for job in claimed] == [due]


# --- due users ------------------------------------------------------------------------


def test_due_users_are_exactly_the_users_with_due_scheduled_jobs(shard):
    _jobs(11, -10, -1)
    _jobs(12, 1, 30)  # only future jobs
    _jobs(13, -1, 5)
    _jobs(14, -10, status="queued", lease=VALID)  # overdue, but already dispatched
    _jobs(15, -10, status="running", attempts=1, lease=VALID)
    _jobs(16, -10, status="succeeded")
    _jobs(17, -10, status="cancelled")
    _jobs(18, 1440)

    assert shard.due_users() == [11, 13]


def test_due_users_is_one_index_probe_per_user_however_many_jobs_are_due(shard):
    heavy_backlog = 5000
    _jobs(21, *([-1] * heavy_backlog))
    for user_id in (22, 23, 24):
        _jobs(user_id, -1, 1)
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("ANALYZE jobs")
        plan = explain(cursor, queries.DUE_USERS, {"ahead": 0.0})
    scans = scans_of_jobs(plan)

    assert scans, "the plan reads the jobs table"
    assert {scan["Node Type"] for scan in scans} <= {"Index Scan", "Index Only Scan"}
    # One row per probe (LIMIT 1): four users with scheduled jobs, plus the probe that
    # finds no next user. The heavy user's 5,000 jobs are never read.
    assert rows_read(scans) <= 5


@pytest.mark.parametrize(
    "statistics", ["current", "from before the backlog", "calling the table tiny"]
)
def test_claim_reads_only_the_jobs_it_takes_however_many_are_due(shard, statistics):
    # Statistics that call the table tiny (an idle shard when a backlog arrives) make
    # reading a whole index look cheaper than a TID scan and than probing an index once a
    # row: discouraging those stands in for them, so a claim that can read the backlog
    # through an index does.
    planner = (
        {"enable_tidscan": "off", "enable_seqscan": "off", "enable_nestloop": "off"}
        if statistics == "calling the table tiny"
        else {}
    )
    epoch = shard.acquire_lease(owner="worker-a")
    if statistics == "from before the backlog":
        # A shard whose jobs had all finished when it was last analysed: the planner
        # believes scheduled jobs are rare (TRUNCATE keeps the column statistics).
        _jobs(21, *([-1] * 2000), status="succeeded")
        with connections[ALIAS].cursor() as cursor:
            cursor.execute("ANALYZE jobs")
            cursor.execute("TRUNCATE jobs")
    backlog, quota = 5000, 500
    _jobs(21, *([-1] * backlog))
    if statistics == "current":
        with connections[ALIAS].cursor() as cursor:
            cursor.execute("ANALYZE jobs")

    pick = {"user_ids": [21], "quotas": [quota], "ahead": 0.0}
    with connections[ALIAS].cursor() as cursor:
        cursor.execute(queries.PICK_FOR_DISPATCH, pick)
        picked = cursor.fetchall()
    hand = {**picked_hand(picked, [0] * len(picked)), "epoch": epoch, "queued_timeout": 60.0}
    pick_scans = scans_of_jobs(_explain_analyze_rolled_back(queries.PICK_FOR_DISPATCH, pick))
    claim_scans = scans_of_jobs(_explain_analyze_rolled_back(queries.CLAIM_PICKED, hand, planner))

    # The picked jobs are read once to choose them, and by the claim once to lock them and
    # once to update them: the cost follows the quota, not the backlog, whatever the
    # planner estimates. (EXPLAIN gives rows per loop, rounded, and the pick loops once per
    # priority: a row of slack each.)
    assert len(picked) == quota
    for scans, reads in ((pick_scans, 1), (claim_scans, 2)):
        assert scans and not [scan for scan in scans if scan["Node Type"] == "Seq Scan"]
        loops = sum(scan["Actual Loops"] for scan in scans)
        assert rows_read(scans) <= reads * quota + loops, scans


def test_a_job_being_cancelled_is_skipped_by_the_claim_without_waiting(shard):
    epoch = shard.acquire_lease(owner="worker-a")
    [cancelled, due] = _jobs(1, -2, -1)

    with connections[ALIAS].cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute("UPDATE jobs SET status = 'cancelled' WHERE id = %s", [cancelled])
        # The claim picks both rows from its snapshot, and skips the one locked here: a
        # claim that waited for row locks deadlocked with executors' claims.
        claimed = _in_another_session_without_waiting(
            lambda other: other.claim(epoch=epoch, quotas={1: 10}, queued_timeout=60.0)
        )
        cursor.execute("COMMIT")

    assert [job.job_id for job in claimed] == [due]
    assert _job(cancelled).status == "cancelled"


def _in_another_session_without_waiting(call: Callable[[ShardStore], T]) -> T:
    """``call`` with a ShardStore of its own (a thread, so its own connection), which must
    return within 10 s while this session holds row locks; what it returned."""
    returned: list[T] = []

    def run() -> None:
        other = ShardStore(alias=ALIAS, shard_id=SHARD)
        try:
            returned.append(call(other))
        finally:
            other.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive(), "it waited for a row lock"
    return returned[0]


def _waiting_for_a_lock(cursor, statement: str = "UPDATE jobs") -> bool:
    """Whether another session's ``statement`` waits for a lock (inside a transaction,
    pg_stat_activity is read once unless its snapshot is cleared)."""
    cursor.execute("SELECT pg_stat_clear_snapshot()")
    cursor.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND query LIKE %s AND pid <> pg_backend_pid()",
        [f"%{statement}%"],
    )
    return cursor.fetchone()[0] > 0


def _explain_analyze_rolled_back(sql: str, params: dict, planner: dict | None = None) -> object:
    """The executed plan of a writing statement, whose writes are then rolled back;
    ``planner``: settings for that transaction (``enable_seqscan``, for instance)."""
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("BEGIN")
        try:
            for name, value in (planner or {}).items():
                cursor.execute("SELECT set_config(%s, %s, true)", [name, value])
            return explain(cursor, sql, params)
        finally:
            cursor.execute("ROLLBACK")


# --- the sweeper ----------------------------------------------------------------------


def test_sweep_makes_queued_jobs_whose_lease_expired_due_again(shard):
    epoch = shard.acquire_lease(owner="worker-a")
    [lost] = _jobs(1, -5, status="queued", lease=EXPIRED)
    [waiting] = _jobs(1, -5, status="queued", lease=VALID)

    result = shard.sweep(epoch=epoch)

    assert (result.unclaimed, result.abandoned) == (1, 0)
    job = _job(lost)
    assert (job.status, job.lease_expires_at, job.attempts) == ("scheduled", None, 0)
    assert _job(waiting).status == "queued"
    assert lost in {
        job.job_id
        for job in shard.claim(epoch=epoch, quotas={1: 10}, queued_timeout=QUEUED_TIMEOUT)
    }


def test_sweep_makes_abandoned_running_jobs_due_again_while_attempts_remain(shard):
    epoch = shard.acquire_lease(owner="worker-a")
    [abandoned] = _jobs(1, -5, status="running", attempts=1, max_attempts=3, lease=EXPIRED)
    [alive] = _jobs(1, -5, status="running", attempts=1, max_attempts=3, lease=VALID)
    [exhausted] = _jobs(1, -5, status="running", attempts=3, max_attempts=3, lease=EXPIRED)
    before = timezone.now()

    result = shard.sweep(epoch=epoch)

    assert (result.unclaimed, result.abandoned) == (0, 1)
    job = _job(abandoned)
    assert (job.status, job.attempts, job.lease_expires_at) == ("scheduled", 1, None)
    assert job.due_at >= before - timedelta(seconds=1)
    assert job.last_error == queries.LOST_ATTEMPT_ERROR
    assert [(e["attempt"], e["error"]) for e in job.attempt_errors] == [
        (1, queries.LOST_ATTEMPT_ERROR)
    ]
    assert _job(alive).status == "running"
    assert _job(exhausted).status == "running"  # fail_abandoned's business, not sweep's


def test_the_sweep_skips_jobs_an_executor_is_changing_without_waiting(shard):
    epoch = shard.acquire_lease(owner="worker-a")
    [lost, claiming] = _jobs(1, -5, -5, status="queued", lease=EXPIRED)
    [abandoned, recording] = _jobs(1, -5, -5, status="running", attempts=1, lease=EXPIRED)

    with connections[ALIAS].cursor() as cursor:
        # An executor inside its transactions, paused, say: a claim and an outcome.
        cursor.execute("BEGIN")
        cursor.execute("UPDATE jobs SET status = 'running' WHERE id = %s", [claiming])
        cursor.execute("UPDATE jobs SET status = 'succeeded' WHERE id = %s", [recording])
        # The sweep runs on the dispatcher's thread: waiting here, it held up the rounds.
        result = _in_another_session_without_waiting(lambda other: other.sweep(epoch=epoch))
        cursor.execute("COMMIT")

    assert (result.unclaimed, result.abandoned) == (1, 1)
    assert (_job(lost).status, _job(abandoned).status) == ("scheduled", "scheduled")
    assert (_job(claiming).status, _job(recording).status) == ("running", "succeeded")


# --- retention -------------------------------------------------------------------------


def _finished(status: str, *, days_ago: float) -> str:
    [job_id] = _jobs(1, -60 * 24 * days_ago, status=status)
    finished_at = timezone.now() - timedelta(days=days_ago)
    Job.objects.using(ALIAS).filter(pk=job_id).update(finished_at=finished_at)
    return job_id


def _remaining() -> set[str]:
    return set(Job.objects.using(ALIAS).values_list("id", flat=True))


def test_purge_deletes_finished_jobs_past_retention_oldest_first(shard):
    oldest = _finished("succeeded", days_ago=40)
    older = _finished("failed", days_ago=35)
    old = _finished("cancelled", days_ago=31)
    recent = _finished("succeeded", days_ago=1)
    [waiting] = _jobs(1, 60 * 24 * 300)  # created now, due in 300 days
    [running] = _jobs(1, -60 * 24 * 40, status="running", attempts=1, lease=VALID)
    cutoff = timezone.now() - timedelta(days=30)

    assert shard.purge_finished_jobs(finished_before=cutoff, limit=2) == 2
    assert _remaining() == {old, recent, waiting, running}
    assert shard.purge_finished_jobs(finished_before=cutoff, limit=2) == 1
    assert shard.purge_finished_jobs(finished_before=cutoff, limit=2) == 0
    assert _remaining() == {recent, waiting, running}
    assert oldest not in _remaining() and older not in _remaining()


def test_purge_reads_only_the_finished_jobs_it_deletes(shard):
    _jobs(21, *([-1] * 3000))  # scheduled: never looked at
    for _ in range(20):
        _finished("succeeded", days_ago=40)
    limit = 10
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("ANALYZE jobs")

    scans = scans_of_jobs(
        _explain_analyze_rolled_back(
            queries.PURGE_FINISHED_JOBS,
            {"finished_before": timezone.now() - timedelta(days=30), "limit": limit},
        )
    )

    # Chosen, then deleted: each deleted row is read twice, and no scheduled job at all.
    assert scans and not [scan for scan in scans if scan["Node Type"] == "Seq Scan"]
    assert rows_read(scans) <= 2 * limit, scans


def _key(name: str, *, age: timedelta) -> None:
    IdempotencyKey.objects.using(ALIAS).create(
        user_id=1, key=name, request_hash="h", job_ids=[], created_at=timezone.now() - age
    )


def _keys() -> set[str]:
    return set(IdempotencyKey.objects.using(ALIAS).values_list("key", flat=True))


def test_purge_deletes_expired_idempotency_keys_oldest_first(shard):
    for hours in (2, 3, 4):
        _key(f"{hours}h", age=timedelta(hours=hours))
    _key("fresh", age=timedelta(minutes=10))
    expired_at = timezone.now() - timedelta(hours=1)

    assert shard.purge_expired_idempotency_keys(expired_at=expired_at, limit=2) == 2
    assert _keys() == {"2h", "fresh"}
    assert shard.purge_expired_idempotency_keys(expired_at=expired_at, limit=2) == 1
    assert shard.purge_expired_idempotency_keys(expired_at=expired_at, limit=2) == 0
    assert _keys() == {"fresh"}


def test_purge_keeps_a_key_a_create_took_over_while_it_waited(shard):
    _key("reused", age=timedelta(hours=2))
    now = timezone.now()
    purged: list[int] = []

    def purge_in_another_session() -> None:
        other = ShardStore(alias=ALIAS, shard_id=SHARD)  # this thread's own connection
        try:
            expired_at = now - timedelta(hours=1)
            purged.append(other.purge_expired_idempotency_keys(expired_at=expired_at, limit=10))
        finally:
            other.close()

    with connections[ALIAS].cursor() as cursor:
        cursor.execute("BEGIN")
        taken = store.claim_idempotency_key(
            ALIAS,
            user_id=1,
            key="reused",
            request_hash="h2",
            job_ids=["j"],
            is_bulk=False,
            now=now,
            ttl=timedelta(hours=1),
        )
        assert taken
        # The purge picks the row from its snapshot, where it is still expired, and waits.
        purge = threading.Thread(target=purge_in_another_session)
        purge.start()
        wait_until(
            lambda: _waiting_for_a_lock(cursor, "DELETE FROM jobs_idempotency_key"),
            timeout=10,
            what="the purge waits for the key's row",
        )
        cursor.execute("COMMIT")
    purge.join(timeout=10)

    assert purged == [0]
    kept = IdempotencyKey.objects.using(ALIAS).get(key="reused")
    assert (kept.request_hash, kept.job_ids) == ("h2", ["j"])


def test_fail_abandoned_dead_letters_exhausted_jobs_then_fails_them(shard):
    epoch = shard.acquire_lease(owner="worker-a")
    [exhausted] = _jobs(5, -5, status="running", attempts=3, max_attempts=3, lease=EXPIRED)
    [retryable] = _jobs(5, -5, status="running", attempts=1, max_attempts=3, lease=EXPIRED)
    letters: list[list[AbandonedJob]] = []

    def dead_letter(jobs: list[AbandonedJob]) -> bool:
        letters.append(jobs)
        return True

    assert shard.fail_abandoned(epoch=epoch, dead_letter=dead_letter) == 1

    [[letter]] = letters
    assert (letter.job_id, letter.user_id, letter.attempts, letter.max_attempts) == (
        exhausted,
        5,
        3,
        3,
    )
    assert letter.handler_params == {"url": "https://example.com/hook"}
    assert letter.attempt_errors == []
    job = _job(exhausted)
    assert (job.status, job.lease_expires_at, job.last_error) == (
        "failed",
        None,
        queries.LOST_ATTEMPT_ERROR,
    )
    assert job.finished_at is not None
    assert [e["attempt"] for e in job.attempt_errors] == [3]
    assert _job(retryable).status == "running"


def test_fail_abandoned_changes_nothing_when_the_dead_letter_is_not_acknowledged(shard):
    epoch = shard.acquire_lease(owner="worker-a")
    _jobs(5, -5, status="running", attempts=3, max_attempts=3, lease=EXPIRED)
    before = _snapshot()

    assert shard.fail_abandoned(epoch=epoch, dead_letter=lambda jobs: False) == 0
    assert _snapshot() == before
    assert shard.fail_abandoned(epoch=epoch, dead_letter=lambda jobs: True) == 1


def test_an_owner_frozen_inside_a_write_does_not_keep_the_next_owner_out(shard):
    """A paused process (SIGSTOP, GC, a stopped VM) inside a fenced write holds the lease row
    FOR SHARE; PostgreSQL ends its idle transaction so the next owner can take the shard."""
    old = shard.acquire_lease(owner="worker-a")
    [job_id] = _jobs(7, -1)
    inside, unfreeze = threading.Event(), threading.Event()
    frozen_outcome: list[BaseException | None] = []

    def frozen_owner() -> None:
        try:
            with shard._fenced(old) as cursor:
                cursor.execute(
                    queries.PICK_FOR_DISPATCH, {"user_ids": [7], "quotas": [1], "ahead": 0.0}
                )
                inside.set()
                unfreeze.wait()  # the process is stopped here, between statements
            frozen_outcome.append(None)
        except DatabaseError as exc:
            frozen_outcome.append(exc)
        finally:
            connections.close_all()

    frozen = threading.Thread(target=frozen_owner)
    frozen.start()
    assert inside.wait(10)
    acquired: list[int] = []

    def next_owner() -> None:
        try:
            acquired.append(ShardStore(alias=ALIAS, shard_id=SHARD).acquire_lease(owner="worker-b"))
        finally:
            connections.close_all()

    taker = threading.Thread(target=next_owner)
    taker.start()
    taker.join(IDLE_IN_TRANSACTION_TIMEOUT + 5)
    acquired_while_frozen = list(acquired)
    unfreeze.set()
    frozen.join(10)
    taker.join(10)

    assert acquired_while_frozen == [old + 1], "the next owner waited for the frozen one"
    [outcome] = frozen_outcome
    assert isinstance(outcome, DatabaseError), "the frozen owner's claim was rolled back"
    assert _job(job_id).status == "scheduled"


def test_an_owner_frozen_while_publishing_dead_letters_does_not_keep_the_next_owner_out(shard):
    """The dead-letter publish may take the whole publish timeout (10 s by default), longer
    than a ZooKeeper session: an owner paused inside it must not hold the lease row, nor
    stall the next owner's sweep, and its late write must not count."""
    old = shard.acquire_lease(owner="worker-a")
    [job_id] = _jobs(5, -5, status="running", attempts=3, max_attempts=3, lease=EXPIRED)
    publishing, unfreeze = threading.Event(), threading.Event()
    frozen_outcome: list[BaseException | int] = []

    def frozen_publish(jobs: list[AbandonedJob]) -> bool:
        publishing.set()
        unfreeze.wait()  # the process is stopped here, the letters not yet acknowledged
        return True

    def frozen_owner() -> None:
        try:
            frozen_outcome.append(shard.fail_abandoned(epoch=old, dead_letter=frozen_publish))
        except ShardFenced as exc:
            frozen_outcome.append(exc)
        finally:
            connections.close_all()

    frozen = threading.Thread(target=frozen_owner)
    frozen.start()
    assert publishing.wait(10)
    next_owner: list[int] = []
    letters: list[list[str]] = []

    def take_over_and_sweep() -> None:
        store = ShardStore(alias=ALIAS, shard_id=SHARD)
        try:
            epoch = store.acquire_lease(owner="worker-b")
            next_owner.append(epoch)
            next_owner.append(
                store.fail_abandoned(
                    epoch=epoch,
                    dead_letter=lambda jobs: letters.append([j.job_id for j in jobs]) or True,
                )
            )
        finally:
            connections.close_all()

    taker = threading.Thread(target=take_over_and_sweep)
    taker.start()
    taker.join(IDLE_IN_TRANSACTION_TIMEOUT + 5)
    while_frozen = list(next_owner)
    unfreeze.set()
    frozen.join(10)
    taker.join(10)

    assert while_frozen == [old + 1, 0], "the next owner waited for the frozen one"
    [outcome] = frozen_outcome
    assert isinstance(outcome, ShardFenced), "the frozen owner's late write was fenced off"
    assert _job(job_id).status == "running", "left for the new owner, untouched"
    assert shard.fail_abandoned(epoch=old + 1, dead_letter=lambda jobs: True) == 1
    assert _job(job_id).status == "failed"
    assert letters == []


def test_queue_lag_is_the_age_of_the_oldest_due_job_not_started(shard):
    assert shard.oldest_due_age() == 0.0
    _jobs(1, 10)  # scheduled, due in ten minutes: not late
    _jobs(2, -1, status="running", attempts=1, lease=VALID)  # started: not waiting
    _jobs(3, -20, status="succeeded")  # finished
    assert shard.oldest_due_age() == 0.0

    _jobs(4, -3, -1)  # scheduled, three minutes overdue
    assert shard.oldest_due_age() == pytest.approx(180, abs=30)

    [published] = _jobs(5, -7, status="queued", lease=VALID)  # waits for an executor
    assert shard.oldest_due_age() == pytest.approx(420, abs=30)
    Job.objects.using(ALIAS).filter(pk=published).update(status="running")
    assert shard.oldest_due_age() == pytest.approx(180, abs=30)


def test_queue_lag_is_one_index_probe_per_user_however_many_jobs_are_due(shard):
    _jobs(21, *([-1] * 5000))
    for user_id in (22, 23, 24):
        _jobs(user_id, -1, 1)
    _jobs(25, *([-1] * 50), status="queued", lease=VALID)
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("ANALYZE jobs")
        plan = explain(cursor, queries.OLDEST_DUE_AGE)
    scans = scans_of_jobs(plan)

    assert scans and {scan["Node Type"] for scan in scans} <= {"Index Scan", "Index Only Scan"}
    # A probe per user with scheduled jobs, one for the end, and the first queued job: the
    # heavy user's 5,000 due jobs and the other 49 queued ones are never read.
    assert rows_read(scans) <= 7, scans


def test_in_flight_counts_queued_and_running_jobs_per_user_and_partition(shard):
    _jobs(1, -1, status="queued", lease=VALID)
    _jobs(1, -1, status="running", attempts=1, lease=VALID)
    _jobs(1, -1)  # scheduled: not in flight
    _jobs(1, -1, status="succeeded")
    _jobs(2, -1, -1, -1, status="queued", lease=VALID)
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("UPDATE jobs SET dispatch_partition = 3 WHERE user_id = 2")

    assert shard.in_flight() == {(1, None): 2, (2, 3): 3}


def test_a_claim_records_the_partition_each_job_was_dealt(shard):
    epoch = shard.acquire_lease(owner="worker-a")
    _jobs(1, -3, -2, -1)
    _jobs(2, -1)
    dealt: list[list[int]] = []

    def deal(owners: list[int]) -> list[int | None]:
        dealt.append(owners)
        return list(range(len(owners)))

    claimed = shard.claim(epoch=epoch, quotas={1: 2, 2: 5}, queued_timeout=60.0, deal=deal)

    assert dealt == [[1, 1, 2]]  # a user's picks together, its oldest first
    assert sorted((job.user_id, job.partition) for job in claimed) == [(1, 0), (1, 1), (2, 2)]
    assert shard.in_flight() == {(1, 0): 1, (1, 1): 1, (2, 2): 1}


def test_a_new_owner_makes_due_again_what_older_owners_claimed_and_no_executor_started(shard):
    old = shard.acquire_lease(owner="worker-a")
    [claimed] = _jobs(1, -1)
    [started] = _jobs(1, -1)
    shard.claim(epoch=old, quotas={1: 2}, queued_timeout=QUEUED_TIMEOUT)
    Job.objects.using(ALIAS).filter(pk=started).update(status="running", attempts=1)
    new = shard.acquire_lease(owner="worker-b")

    assert shard.reset_older_dispatches(epoch=new) == 1
    assert (_job(claimed).status, _job(claimed).dispatched_at) == ("scheduled", None)
    assert _job(started).status == "running"
    with pytest.raises(ShardFenced):
        shard.reset_older_dispatches(epoch=old)


def test_a_new_owner_skips_the_jobs_an_executor_is_claiming_without_waiting(shard):
    old = shard.acquire_lease(owner="worker-a")
    [waiting, claiming] = _jobs(1, -2, -1)
    shard.claim(epoch=old, quotas={1: 2}, queued_timeout=QUEUED_TIMEOUT)
    new = shard.acquire_lease(owner="worker-b")

    with connections[ALIAS].cursor() as cursor:
        cursor.execute("BEGIN")  # an executor's claim of the old owner's message, under way
        cursor.execute("UPDATE jobs SET status = 'running' WHERE id = %s", [claiming])
        # Waiting for this row, the reset deadlocked with a claim that went on to a row the
        # reset held, and PostgreSQL broke it after a second by failing one of them.
        reset = _in_another_session_without_waiting(
            lambda other: other.reset_older_dispatches(epoch=new)
        )
        cursor.execute("COMMIT")

    assert reset == 1
    assert (_job(waiting).status, _job(claiming).status) == ("scheduled", "running")
