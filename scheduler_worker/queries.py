"""The SQL a scheduler runs against one shard, as named queries.

Every write is made inside a transaction that, before writing, locks the shard's lease
row with ``FOR SHARE`` and checks its epoch (``LOCK_LEASE``). A new owner's ``ACQUIRE_LEASE``
needs that row exclusively, so it waits for any write in progress and every later write
of the old owner sees the new epoch and is refused: the fence.
"""

from jobsvc.jobs.lifecycle import (
    FAILED,
    FINISHED,
    IN_FLIGHT,
    QUEUED,
    RUNNING,
    SCHEDULED,
    append_attempt_error,
)
from jobsvc.jobs.models import AttemptOutcome
from jobsvc.jobs.priorities import PRIORITY_MAX, PRIORITY_MIN

ACQUIRE_LEASE = """
    INSERT INTO jobs_shard_lease (shard_id, epoch, owner, acquired_at)
    VALUES (%(shard_id)s, 1, %(owner)s, now())
    ON CONFLICT (shard_id) DO UPDATE
       SET epoch = jobs_shard_lease.epoch + 1, owner = EXCLUDED.owner, acquired_at = now()
    RETURNING epoch
"""

LOCK_LEASE = "SELECT epoch FROM jobs_shard_lease WHERE shard_id = %(shard_id)s FOR SHARE"

# The epoch without a lock: a check before work that is fenced with LOCK_LEASE later.
READ_LEASE = "SELECT epoch FROM jobs_shard_lease WHERE shard_id = %(shard_id)s"

# The owner's dispatch rounds, for the admin's cluster page; a stale owner changes nothing.
RECORD_ROUND = """
    UPDATE jobs_shard_lease SET last_round_at = now()
     WHERE shard_id = %(shard_id)s AND epoch = %(epoch)s
"""

# For the backlog gauge only (every sweep): counting stops at a million.
COUNT_DUE = f"""
    SELECT count(*) FROM (SELECT 1 FROM jobs WHERE status = {SCHEDULED} AND due_at <= now()
                           LIMIT 1000000) AS due
"""

# The earliest due scheduled job of each (user, priority) pair, found by a loose index scan
# of jobs_due_by_user_idx (user_id, priority, due_at, id): one index probe per pair,
# however many jobs each has.
DUE_HEADS = f"""
    WITH RECURSIVE heads AS (
        (SELECT user_id, priority, due_at FROM jobs
          WHERE status = {SCHEDULED}
          ORDER BY user_id, priority, due_at, id LIMIT 1)
        UNION ALL
        SELECT next.user_id, next.priority, next.due_at
          FROM heads,
       LATERAL (SELECT user_id, priority, due_at FROM jobs
                 WHERE status = {SCHEDULED}
                   AND (user_id, priority) > (heads.user_id, heads.priority)
                 ORDER BY user_id, priority, due_at, id LIMIT 1) AS next
    )
"""

# Queue lag: seconds since the due time of the oldest job that is due and not started, 0
# when none is. Scheduled jobs: the earliest due of each (user, priority) (DUE_HEADS).
# Published jobs waiting for an executor: the first queued entry of the in-flight index,
# in lease order, which is the order in which they became both due and published
# (CLAIM_PICKED sets the lease to that moment plus a fixed timeout); its due time
# stands for theirs.
OLDEST_DUE_AGE = f"""
{DUE_HEADS}    SELECT coalesce(greatest(0, extract(epoch FROM now() - min(due_at))), 0)::float8
      FROM (SELECT min(due_at) AS due_at FROM heads
            UNION ALL
            (SELECT due_at FROM jobs WHERE status = {QUEUED} ORDER BY lease_expires_at LIMIT 1)
           ) AS oldest
     WHERE due_at <= now()
"""

# Published, unfinished jobs per user and partition: the partial in-flight index keeps it
# to those rows.
COUNT_IN_FLIGHT = f"""
    SELECT user_id, dispatch_partition, count(*) FROM jobs
     WHERE status IN {IN_FLIGHT} GROUP BY user_id, dispatch_partition
"""


# The rows matching ``condition`` but those another transaction is changing, which the
# takeover's reset and the sweeps skip (one still matching after is the next sweep's, as
# is a row changed since the statement's snapshot). Waiting, the reset deadlocked with
# claims (CLAIM_PICKED says why), and a sweep held up the shard's rounds (it runs on the
# dispatch thread) while an executor paused inside its claim kept the lock.
def _unlocked(condition: str) -> str:
    return f"ctid = ANY(ARRAY(SELECT ctid FROM jobs WHERE {condition} FOR UPDATE SKIP LOCKED))"


# At a takeover: jobs an older owner claimed for dispatch that no executor started. The old
# owner may have died before their messages went out, so they are made due again at once
# rather than after the queued timeout (an executor claiming one holds its message).
RESET_OLDER_DISPATCHES = f"""
    UPDATE jobs
       SET status = {SCHEDULED}, dispatched_at = NULL, lease_expires_at = NULL,
           updated_at = now()
     WHERE {_unlocked(f"status = {QUEUED} AND dispatch_epoch < %(epoch)s")}
"""

# Users with jobs due within ``ahead`` seconds (DispatchConfig.dispatch_ahead): a user is
# due if any of their (user, priority) pairs' earliest job is (DUE_HEADS). Most users use
# one priority, so this is about one index probe per user.
DUE_USERS = f"""
{DUE_HEADS}    SELECT user_id FROM heads
     WHERE due_at <= now() + make_interval(secs => %(ahead)s)
     GROUP BY user_id ORDER BY user_id
"""

# Pick up to quota.n of each user's due jobs (due within ``ahead`` seconds), highest
# priority first and oldest first within a priority: each priority is read as its own
# range of the due index (highest first, at most quota.n rows each), so a user's urgent
# job is taken ahead of their own backlog without reading the backlog. A user's picks come
# together, in that order.
PICK_FOR_DISPATCH = f"""
               SELECT picked.ctid, picked.id, quota.user_id
                 FROM unnest(%(user_ids)s::bigint[], %(quotas)s::int[]) AS quota(user_id, n),
              LATERAL (SELECT by_priority.ctid, by_priority.id
                         FROM generate_series({PRIORITY_MAX}, {PRIORITY_MIN}, -1) AS p(priority),
                      LATERAL (SELECT ctid, due_at, id FROM jobs
                                WHERE status = {SCHEDULED} AND user_id = quota.user_id
                                  AND priority = p.priority
                                  AND due_at <= now() + make_interval(secs => %(ahead)s)
                                ORDER BY due_at, id LIMIT quota.n) AS by_priority
                        ORDER BY p.priority DESC, by_priority.due_at, by_priority.id
                        LIMIT quota.n) AS picked"""

# Mark the picked jobs queued, each with its partition. A job sent ahead of its due time
# waits for it in the executor, so its lease (the queued timeout) runs from its due time.
# The rows are found by their ctids, as a TID scan, and nothing else in the statement may
# be read through an index: when the statistics call the table tiny (an idle shard when a
# backlog arrives), any index path looks cheaper, and reading a whole index to filter it
# took 1.7 s per 2,000 jobs on a shard of 75,000. So ``ctid = ANY(ARRAY(SELECT ...))``,
# whose array size the planner cannot see (with the join to the hand alone, it estimates
# from the literal array and reads the whole table when the quota is a tenth of it); no
# check of the status; and the ids compared with IS NOT DISTINCT FROM, which no index
# serves (with ``=``, the primary key is read whole for the join). A row updated since the
# pick (a cancel) has a new ctid, so it is skipped and stays as it is; the id check keeps a
# reused slot from being taken for it. A row another transaction is changing now is
# skipped too (SKIP LOCKED), and picked again by a later round if it is still due: the
# claim never waits for a row lock. Waiting, it deadlocked with executors' claims of the
# same jobs in another order (jobs a new owner made due again while executors held their
# earlier messages), and PostgreSQL takes deadlock_timeout (a second) to break one.
CLAIM_PICKED = f"""
    UPDATE jobs
       SET status = {QUEUED}, dispatched_at = now(), updated_at = now(),
           dispatch_epoch = %(epoch)s, dispatch_partition = hand.partition,
           lease_expires_at = GREATEST(jobs.due_at, now())
                              + make_interval(secs => %(queued_timeout)s)
      FROM unnest(%(ctids)s::tid[], %(ids)s::text[], %(partitions)s::smallint[])
           AS hand(ctid, id, partition)
     WHERE jobs.ctid = ANY(ARRAY(SELECT ctid FROM jobs
                                  WHERE ctid = ANY(ARRAY(SELECT unnest(%(ctids)s::tid[])))
                                  FOR UPDATE SKIP LOCKED))
       AND jobs.ctid = hand.ctid AND jobs.id IS NOT DISTINCT FROM hand.id
 RETURNING jobs.id, jobs.user_id, jobs.attempts, jobs.due_at, jobs.dispatched_at,
           jobs.priority, jobs.handler, jobs.dispatch_partition
"""

# Jobs whose messages the broker did not acknowledge go back to being due at once.
RELEASE_UNPUBLISHED = f"""
    UPDATE jobs
       SET status = {SCHEDULED}, dispatched_at = NULL, lease_expires_at = NULL,
           updated_at = now()
     WHERE id = ANY(%(job_ids)s) AND status = {QUEUED} AND dispatch_epoch = %(epoch)s
"""


# A queued job nobody claimed in time: its message was lost (broker restart) or is stuck
# behind a dead consumer. Make it due again; a late duplicate is dropped at claim time.
SWEEP_UNCLAIMED = f"""
    UPDATE jobs
       SET status = {SCHEDULED}, lease_expires_at = NULL, updated_at = now()
     WHERE {_unlocked(f"status = {QUEUED} AND lease_expires_at < now()")}
"""

# A running job whose executor died (its lease expired): that attempt is over. With
# attempts left, the job is due again at once; otherwise it fails (ABANDONED_EXHAUSTED
# finds those, the dead-letter message is published, then FAIL_ABANDONED records it).
# Both return the attempts they end, for their history rows (RECORD_LOST_ATTEMPTS).
LOST_ATTEMPT_ERROR = "the executor running this attempt stopped responding"
_APPEND_LOST_ATTEMPT_ERROR = append_attempt_error(attempt="jobs.attempts", error="%(error)s::text")

_ABANDONED = f"status = {RUNNING} AND lease_expires_at < now() AND attempts < max_attempts"
SWEEP_ABANDONED = f"""
    UPDATE jobs
       SET status = {SCHEDULED}, due_at = now(), lease_expires_at = NULL, updated_at = now(),
           last_error = %(error)s,
           {_APPEND_LOST_ATTEMPT_ERROR}
     WHERE {_unlocked(_ABANDONED)}
 RETURNING id, attempts, started_at
"""

# Finished jobs past the retention time, oldest first, a batch at a time, and their
# attempt history with them; returns how many jobs went. Picked rows are deleted by ctid,
# as CLAIM_PICKED updates them: a TID scan whatever the planner's estimates.
# Finished jobs do not change, and a row that did has a new ctid and is kept. Their
# attempts are found through jobs_attempt's primary key, which leads with job_id.
PURGE_FINISHED_JOBS = f"""
    WITH purged AS (
        DELETE FROM jobs
         WHERE ctid = ANY(ARRAY(
                   SELECT ctid FROM jobs
                    WHERE status IN {FINISHED}
                      AND finished_at < %(finished_before)s
                    ORDER BY finished_at
                    LIMIT %(limit)s))
        RETURNING id
    ), history AS (
        DELETE FROM jobs_attempt WHERE job_id = ANY(ARRAY(SELECT id FROM purged))
    )
    SELECT count(*) FROM purged
"""

# Idempotency-Keys past their TTL, oldest first, a batch at a time. The outer age check
# matters: a create may take an expired key over (jobsvc.jobs.store) while this runs, and
# PostgreSQL re-checks the outer condition on the row it updated, so a key just renewed
# is kept.
PURGE_EXPIRED_IDEMPOTENCY_KEYS = """
    DELETE FROM jobs_idempotency_key
     WHERE created_at <= %(expired_at)s
       AND id IN (SELECT id FROM jobs_idempotency_key
                   WHERE created_at <= %(expired_at)s
                   ORDER BY created_at
                   LIMIT %(limit)s)
"""

PURGE_BULK_DECISIONS = """
    DELETE FROM jobs_bulk_decision
     WHERE batch IN (SELECT batch FROM jobs_bulk_decision
                      WHERE decided_at <= %(decided_before)s
                      ORDER BY decided_at
                      LIMIT %(limit)s)
"""

# Rows another transaction holds are skipped: a previous owner, paused while it publishes
# their dead letters, must not stall the next owner's sweep (nor its dispatch rounds).
ABANDONED_EXHAUSTED = f"""
    SELECT id, user_id, attempts, max_attempts, handler, handler_params, message,
           execute_at, created_at, attempt_errors
      FROM jobs
     WHERE status = {RUNNING} AND lease_expires_at < now() AND attempts >= max_attempts
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
"""

FAIL_ABANDONED = f"""
    UPDATE jobs
       SET status = {FAILED}, finished_at = now(), lease_expires_at = NULL, updated_at = now(),
           last_error = %(error)s,
           {_APPEND_LOST_ATTEMPT_ERROR}
     WHERE id = ANY(%(job_ids)s) AND status = {RUNNING} AND lease_expires_at < now()
 RETURNING id, attempts, started_at
"""

# The attempts SWEEP_ABANDONED or FAIL_ABANDONED ended, as lost, in the attempt history
# (jobs_attempt); in the same transaction. An attempt with a row already keeps it.
RECORD_LOST_ATTEMPTS = f"""
    INSERT INTO jobs_attempt (job_id, attempt, started_at, finished_at, outcome, error)
    SELECT d.job_id, d.attempt, coalesce(d.started_at, now()), now(),
           '{AttemptOutcome.LOST.value}', %(error)s
      FROM unnest(%(job_ids)s::text[], %(attempts)s::int[], %(started)s::timestamptz[])
           AS d(job_id, attempt, started_at)
        ON CONFLICT (job_id, attempt) DO NOTHING
"""
