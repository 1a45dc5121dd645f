"""The SQL an executor runs against a shard, as named queries.

Every statement is conditional on the job's status and attempt number, so a duplicate
message, a message from an earlier attempt, or an outcome reported after the sweeper gave
the attempt up changes nothing.
"""

from jobsvc.jobs.lifecycle import (
    FAILED,
    RUNNING,
    SCHEDULED,
    STARTABLE,
    SUCCEEDED,
    append_attempt_error,
)

_APPEND_ERROR = append_attempt_error(attempt="d.attempt", error="d.error")

# What the messages name: the attempt each asks to start, and the job's user and due time
# as the scheduler dispatched it. A claim starts an attempt only if the row still matches
# all of it: executors trust nothing else in a message.
_NAMED = """unnest(%(job_ids)s::text[], %(attempts)s::int[], %(user_ids)s::bigint[],
                  %(due_ats)s::timestamptz[]) AS m(job_id, attempt, user_id, due_at)"""

# The attempts named that a claim would start once due. A due job can be started from
# ``scheduled`` too: its message was reported failed, or its dispatcher's shard was taken
# over, and the scheduler made it due again, but the broker has the message after all.
_MATCHES = f"""j.id = m.job_id AND j.attempts = m.attempt - 1
                                  AND j.user_id = m.user_id AND j.due_at = m.due_at
                                  AND j.status IN {STARTABLE}"""


# Each named attempt's job, if it matches (``condition`` on alias ``j`` besides), found by
# one primary-key probe per name: a LATERAL subquery with a LIMIT is never merged into the
# join, so the plan is that nested loop whatever the statistics say. Joined to the names,
# the planner read the whole table when its statistics called it tiny (an idle shard when
# a backlog arrives): 4.2 s for a claim of 250 jobs on a shard of 75,000, against 5 ms.
# A statement that updates the rows found locks them in the probe (``lock``), so a row
# another transaction is changing is waited for and checked again as that left it (a
# duplicate's claim of an attempt that ran finds nothing), and goes back to them by ctid
# alone, which no index serves either. A row changed meanwhile is then not updated (the
# statement's snapshot cannot see its new version): the change that leaves a job
# startable, a new shard owner making it due again, also dispatches it again.
def _found(condition: str = "", *, lock: bool = False) -> str:
    return f"""{_NAMED}
           CROSS JOIN LATERAL (SELECT j.ctid, j.id, j.due_at FROM jobs AS j
                                WHERE {_MATCHES} {condition}
                                LIMIT 1 {"FOR UPDATE OF j" if lock else ""}) AS found"""


# Each outcome's job in ``names`` (aliased ``d``, with a ``job_id``), found by its id alone
# (one primary-key probe per name, as in ``_found``); the statement checks its status and
# attempt after, outside the subquery, where the LIMIT keeps them. A status inside the
# probe would let a partial index serve it: with statistics taken before the jobs
# finished, 'succeeded' had the planner scan the index of finished jobs, every one the
# shard keeps, once per name (joined to the names, once per batch). The claims' statuses
# (``_MATCHES``) imply no partial index's condition, so theirs stay in the probe.
def _by_id(names: str, columns: str, *, lock: bool = False) -> str:
    return f"""{names}
           CROSS JOIN LATERAL (SELECT {columns} FROM jobs AS j WHERE j.id = d.job_id
                                LIMIT 1 {"FOR UPDATE OF j" if lock else ""}) AS found"""


# The (job id, attempt number) pairs an outcome statement names.
_ATTEMPTS = "unnest(%(job_ids)s::text[], %(attempts)s::int[]) AS d(job_id, attempt)"

# The attempts RETRY, NOT_STARTED and FAIL name, with each one's retry delay and error
# (each statement reads those it needs).
_FINISHED_ATTEMPTS = """unnest(%(job_ids)s::text[], %(attempts)s::int[], %(delays)s::float8[],
                  %(errors)s::text[]) AS d(job_id, attempt, delay, error)"""

# The named attempts (``d``) whose jobs are still running them. The ids are given to the
# jobs' scan as an array too, so a scan of the primary key reads those ids alone: joined
# by ``d.job_id`` only, with statistics that call the table tiny, the planner scanned the
# whole primary key (every waiting and finished job) in three test runs of six. It may
# still scan the index of jobs in flight, which the in-flight limit bounds. A job changed
# meanwhile (given up by the sweeper) is checked again as that left it.
_STILL_RUNNING = f"""jobs.id = ANY(%(job_ids)s::text[]) AND jobs.id = d.job_id
       AND jobs.status = {RUNNING} AND jobs.attempts = d.attempt"""

# ``claims.Attempt``'s fields, in its order.
_RETURNING = """jobs.id, jobs.user_id, jobs.shard_id, jobs.attempts, jobs.max_attempts,
           jobs.timeout_seconds, jobs.handler, jobs.handler_params, jobs.message,
           jobs.execute_at, jobs.due_at, jobs.created_at, jobs.attempt_errors"""

# Never before its due time by the database's clock, whatever the executor's says.
_DUE = "AND j.due_at <= now()"

# Start the attempts named; they hold a lease the executor renews while they run
# (RENEW_LEASES). A job started from ``scheduled`` gets a ``dispatched_at`` no later than
# its start.
CLAIM = f"""
    UPDATE jobs
       SET status = {RUNNING}, attempts = jobs.attempts + 1, started_at = now(),
           updated_at = now(), dispatched_at = COALESCE(jobs.dispatched_at, now()),
           lease_expires_at = now() + make_interval(secs => %(lease)s)
      FROM {_found(_DUE, lock=True)}
     WHERE jobs.ctid = found.ctid
 RETURNING {_RETURNING}
"""

# Start and finish in one write the attempts of CLAIM whose handler runs inline (never
# blocks): the executor runs them inside this statement's transaction and commits only
# after they returned; one that failed is made running again (REOPEN) before the commit
# and recorded like any other outcome. The rows stay locked until the commit, so a cancel
# or another executor's claim of the same attempt waits, then finds the job finished.
CLAIM_SUCCEEDED = f"""
    UPDATE jobs
       SET status = {SUCCEEDED}, attempts = jobs.attempts + 1, started_at = now(),
           finished_at = now(), updated_at = now(), lease_expires_at = NULL,
           dispatched_at = COALESCE(jobs.dispatched_at, now())
      FROM {_found(_DUE + " AND j.handler = ANY(%(handlers)s::text[])", lock=True)}
     WHERE jobs.ctid = found.ctid
 RETURNING {_RETURNING}
"""

# Of the attempts named, those a claim would start once due, with their due time on the
# database's clock; nothing is changed or locked.
NOT_YET_DUE = f"""
    SELECT found.id, m.attempt, extract(epoch FROM found.due_at)::float8
      FROM {_found("AND j.due_at > now()")}
"""

# The leases of attempts still running here, extended while their handlers run.
RENEW_LEASES = f"""
    UPDATE jobs SET lease_expires_at = now() + make_interval(secs => %(lease)s)
      FROM {_ATTEMPTS}
     WHERE {_STILL_RUNNING}
"""

DATABASE_CLOCK = "SELECT extract(epoch FROM clock_timestamp())::float8"

# A job whose inline handler failed, in the transaction that just marked it succeeded.
REOPEN = f"""
    UPDATE jobs
       SET status = {RUNNING}, finished_at = NULL,
           lease_expires_at = now() + make_interval(secs => %(lease)s)
      FROM {_by_id(_ATTEMPTS, "j.ctid, j.status, j.attempts", lock=True)}
     WHERE jobs.ctid = found.ctid AND found.status = {SUCCEEDED}
       AND found.attempts = d.attempt
"""

SUCCEED = f"""
    UPDATE jobs
       SET status = {SUCCEEDED}, finished_at = now(), updated_at = now(),
           lease_expires_at = NULL
      FROM {_ATTEMPTS}
     WHERE {_STILL_RUNNING}
"""

RETRY = f"""
    UPDATE jobs
       SET status = {SCHEDULED}, due_at = now() + make_interval(secs => d.delay),
           last_error = d.error, updated_at = now(), lease_expires_at = NULL,
           {_APPEND_ERROR}
      FROM {_FINISHED_ATTEMPTS}
     WHERE {_STILL_RUNNING}
"""

# Attempts whose handler did nothing (NotStarted): the job is due again after the delay,
# as if the attempt had never been claimed. started_at goes back to the previous attempt's
# start (none for the first). The attempt number is used again by the next dispatch; a
# stale message of this one names the old due time, which no longer matches.
NOT_STARTED = f"""
    UPDATE jobs
       SET status = {SCHEDULED}, attempts = jobs.attempts - 1,
           due_at = now() + make_interval(secs => d.delay), updated_at = now(),
           lease_expires_at = NULL,
           started_at = (SELECT a.started_at FROM jobs_attempt a
                          WHERE a.job_id = jobs.id AND a.attempt = jobs.attempts - 1)
      FROM {_FINISHED_ATTEMPTS}
     WHERE {_STILL_RUNNING}
"""

# Final failures: RETURNING names the attempts this statement failed, so a dead letter is
# sent for those only (an attempt the sweeper already took back, or failed itself, is not
# this executor's to dead-letter).
FAIL = f"""
    UPDATE jobs
       SET status = {FAILED}, finished_at = now(), last_error = d.error, updated_at = now(),
           lease_expires_at = NULL,
           {_APPEND_ERROR}
      FROM {_FINISHED_ATTEMPTS}
     WHERE {_STILL_RUNNING}
 RETURNING jobs.id, jobs.attempts
"""

# The attempt history (jobs_attempt): one row per finished attempt, inserted by one
# statement per batch, right after the statement above that recorded the outcomes, in its
# transaction. Only attempts that statement finished get a row: the job must now have the
# status it set (``status``), the same attempt number, and ``updated_at = now()``, which
# every outcome statement sets and which is the transaction's start, so no other
# transaction's change matches. An outcome that changed nothing (a duplicate, or an
# attempt the sweeper gave up, which wrote its own row) adds nothing, and the primary key
# would drop a second row for one attempt. Each job is found by its id (``_by_id``).
_OUTCOMES = """unnest(%(job_ids)s::text[], %(attempts)s::int[], %(outcomes)s::text[],
                  %(errors)s::text[], %(http_statuses)s::int[], %(excerpts)s::text[])
           AS d(job_id, attempt, outcome, error, http_status, excerpt)"""
RECORD_ATTEMPTS = f"""
    INSERT INTO jobs_attempt (job_id, attempt, started_at, finished_at, outcome, error,
                              http_status, response_excerpt)
    SELECT found.id, found.attempts, coalesce(found.started_at, now()), now(), d.outcome,
           coalesce(d.error, ''), d.http_status, coalesce(d.excerpt, '')
      FROM {_by_id(_OUTCOMES, "j.id, j.attempts, j.started_at, j.status, j.updated_at")}
     WHERE found.attempts = d.attempt AND found.status = %(status)s
       AND found.updated_at = now()
        ON CONFLICT (job_id, attempt) DO NOTHING
"""
