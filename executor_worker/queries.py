"""The SQL an executor runs against a shard, as named queries.

Every statement is conditional on the job's status and attempt number, so a duplicate
message, a message from an earlier attempt, or an outcome reported after the sweeper gave
the attempt up changes nothing.
"""

# The (job_id, attempt) pairs named in the messages, as the claims below read them.
_NAMED = "unnest(%(job_ids)s::text[], %(attempts)s::int[]) AS m(job_id, attempt)"
# The same, less the jobs another transaction has locked, without waiting for it: for
# jobs taken by work stealing (WORK_STOLEN below), whose messages another executor holds.
# That one may be claiming the same jobs; one of two claims that waited for each other's
# rows would be ended by PostgreSQL's deadlock detection, after a second. A stolen job
# that is locked is dropped here: the executor holding its message still has it.
_NAMED_UNLOCKED = """(
    SELECT m.job_id, m.attempt
      FROM unnest(%(job_ids)s::text[], %(attempts)s::int[]) AS m(job_id, attempt)
      JOIN jobs ON jobs.id = m.job_id
       FOR UPDATE OF jobs SKIP LOCKED) AS m"""

# The attempts named that a claim would start now.
_STARTABLE = """jobs.id = m.job_id AND jobs.attempts = m.attempt - 1
       AND (jobs.status = 'queued' OR (jobs.status = 'scheduled' AND jobs.due_at <= now()))"""

# Start the attempts named. A due job can be started from ``scheduled`` too: its publishing
# was reported failed and the scheduler made it due again (RELEASE_UNPUBLISHED clears
# ``dispatched_at``), but the broker kept the message after all; it was dispatched then,
# so it gets a ``dispatched_at`` no later than its start.
_CLAIM = """
    UPDATE jobs
       SET status = 'running', attempts = jobs.attempts + 1, started_at = now(),
           updated_at = now(), dispatched_at = COALESCE(jobs.dispatched_at, now()),
           lease_expires_at = now() + make_interval(secs => jobs.timeout_seconds + %(grace)s)
      FROM {named}
     WHERE {startable}
 RETURNING jobs.id, jobs.user_id, jobs.shard_id, jobs.attempts, jobs.max_attempts,
           jobs.timeout_seconds, jobs.handler, jobs.handler_params, jobs.message,
           jobs.execute_at, jobs.due_at, jobs.created_at, jobs.attempt_errors
"""
CLAIM = _CLAIM.format(named=_NAMED, startable=_STARTABLE)
CLAIM_UNLOCKED = _CLAIM.format(named=_NAMED_UNLOCKED, startable=_STARTABLE)

# Start and finish in one write the attempts of CLAIM whose handler runs inline (never
# blocks): the executor runs them inside this statement's transaction and commits only
# after they returned; one that failed is made running again (REOPEN) before the commit
# and recorded like any other outcome. The rows stay locked until the commit, so a cancel
# or another executor's claim of the same attempt waits, then finds the job finished.
_CLAIM_SUCCEEDED = """
    UPDATE jobs
       SET status = 'succeeded', attempts = jobs.attempts + 1, started_at = now(),
           finished_at = now(), updated_at = now(), lease_expires_at = NULL,
           dispatched_at = COALESCE(jobs.dispatched_at, now())
      FROM {named}
     WHERE {startable}
       AND jobs.handler = ANY(%(handlers)s::text[])
 RETURNING jobs.id, jobs.user_id, jobs.shard_id, jobs.attempts, jobs.max_attempts,
           jobs.timeout_seconds, jobs.handler, jobs.handler_params, jobs.message,
           jobs.execute_at, jobs.due_at, jobs.created_at, jobs.attempt_errors
"""
CLAIM_SUCCEEDED = _CLAIM_SUCCEEDED.format(named=_NAMED, startable=_STARTABLE)
CLAIM_SUCCEEDED_UNLOCKED = _CLAIM_SUCCEEDED.format(named=_NAMED_UNLOCKED, startable=_STARTABLE)

# Of the attempts named, those CLAIM would start now; nothing is changed or locked. For
# held copies of jobs that another executor may have started (see
# ExecutorWorker._drop_started_elsewhere).
STARTABLE = f"SELECT jobs.id, m.attempt FROM jobs, {_NAMED} WHERE {_STARTABLE}"

REOPEN = """
    UPDATE jobs
       SET status = 'running', finished_at = NULL,
           lease_expires_at = now() + make_interval(secs => jobs.timeout_seconds + %(grace)s)
      FROM unnest(%(job_ids)s::text[], %(attempts)s::int[]) AS d(job_id, attempt)
     WHERE jobs.id = d.job_id AND jobs.status = 'succeeded' AND jobs.attempts = d.attempt
"""

SUCCEED = """
    UPDATE jobs
       SET status = 'succeeded', finished_at = now(), updated_at = now(),
           lease_expires_at = NULL
      FROM unnest(%(job_ids)s::text[], %(attempts)s::int[]) AS d(job_id, attempt)
     WHERE jobs.id = d.job_id AND jobs.status = 'running' AND jobs.attempts = d.attempt
"""

RETRY = """
    UPDATE jobs
       SET status = 'scheduled', due_at = now() + make_interval(secs => d.delay),
           last_error = d.error, updated_at = now(), lease_expires_at = NULL,
           attempt_errors = jobs.attempt_errors || jsonb_build_array(jsonb_build_object(
               'attempt', d.attempt, 'error', d.error, 'at', now()))
      FROM unnest(%(job_ids)s::text[], %(attempts)s::int[], %(delays)s::float8[],
                  %(errors)s::text[]) AS d(job_id, attempt, delay, error)
     WHERE jobs.id = d.job_id AND jobs.status = 'running' AND jobs.attempts = d.attempt
"""

# Final failures: RETURNING names the attempts this statement failed, so a dead letter is
# sent for those only (an attempt the sweeper already took back, or failed itself, is not
# this executor's to dead-letter).
FAIL = """
    UPDATE jobs
       SET status = 'failed', finished_at = now(), last_error = d.error, updated_at = now(),
           lease_expires_at = NULL,
           attempt_errors = jobs.attempt_errors || jsonb_build_array(jsonb_build_object(
               'attempt', d.attempt, 'error', d.error, 'at', now()))
      FROM unnest(%(job_ids)s::text[], %(attempts)s::int[], %(errors)s::text[])
           AS d(job_id, attempt, error)
     WHERE jobs.id = d.job_id AND jobs.status = 'running' AND jobs.attempts = d.attempt
 RETURNING jobs.id, jobs.attempts
"""

# Work stealing (executor_worker.work_stealing): per user, the newest of the jobs that were
# published, are due and no executor has started yet, up to ``per_user`` and half of them
# (the last one too). Left out: those the executor looking holds itself (``held``), and
# those published or due less than ``waited`` seconds ago, on their way to an executor
# that keeps up rather than waiting in one that does not.
# Another executor holds their messages and runs a user's jobs oldest first on each
# shard (the newest half is looked for per shard), so the newest are the last it would
# reach, and with half each the two run out about together (the one that runs out first
# looks again). Nothing is changed here: the jobs are started by CLAIM_UNLOCKED, and
# whichever executor claims a job second drops its copy.
WORK_STOLEN = """
    SELECT j.id, j.attempts + 1, j.user_id, j.priority, j.handler, j.due_at, j.dispatched_at,
           coalesce(j.dispatch_epoch, 0)
      FROM unnest(%(users)s::bigint[]) AS u(user_id)
     CROSS JOIN LATERAL (
           SELECT id, attempts, user_id, priority, handler, due_at, dispatched_at,
                  dispatch_epoch,
                  row_number() OVER (ORDER BY id DESC) AS newest, count(*) OVER () AS queued
             FROM jobs
            WHERE jobs.user_id = u.user_id AND jobs.status = 'queued' AND jobs.due_at <= now()
              AND NOT jobs.id = ANY(%(held)s::text[])
              AND greatest(jobs.due_at, coalesce(jobs.dispatched_at, jobs.due_at))
                  <= now() - make_interval(secs => %(waited)s)
           ) AS j
     WHERE j.newest <= least(%(per_user)s, (j.queued + 1) / 2)
"""
