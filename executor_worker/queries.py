"""The SQL an executor runs against a shard, as named queries.

Every statement is conditional on the job's status and attempt number, so a duplicate
message, a message from an earlier attempt, or an outcome reported after the sweeper gave
the attempt up changes nothing.
"""

# Start the attempts named in the messages: (job_id, attempt) pairs.
CLAIM = """
    UPDATE jobs
       SET status = 'running', attempts = jobs.attempts + 1, started_at = now(),
           updated_at = now(),
           lease_expires_at = now() + make_interval(secs => jobs.timeout_seconds + %(grace)s)
      FROM unnest(%(job_ids)s::text[], %(attempts)s::int[]) AS m(job_id, attempt)
     WHERE jobs.id = m.job_id AND jobs.attempts = m.attempt - 1
       AND (jobs.status = 'queued' OR (jobs.status = 'scheduled' AND jobs.due_at <= now()))
 RETURNING jobs.id, jobs.user_id, jobs.shard_id, jobs.attempts, jobs.max_attempts,
           jobs.timeout_seconds, jobs.handler, jobs.handler_params, jobs.message,
           jobs.execute_at, jobs.due_at, jobs.created_at, jobs.attempt_errors
"""

# Start and finish in one write the attempts of CLAIM whose handler runs inline (never
# blocks): the executor runs them inside this statement's transaction and commits only
# after they returned; one that failed is made running again (REOPEN) before the commit
# and recorded like any other outcome. The rows stay locked until the commit, so a cancel
# or another executor's claim of the same attempt waits, then finds the job finished.
CLAIM_SUCCEEDED = """
    UPDATE jobs
       SET status = 'succeeded', attempts = jobs.attempts + 1, started_at = now(),
           finished_at = now(), updated_at = now(), lease_expires_at = NULL
      FROM unnest(%(job_ids)s::text[], %(attempts)s::int[]) AS m(job_id, attempt)
     WHERE jobs.id = m.job_id AND jobs.attempts = m.attempt - 1
       AND (jobs.status = 'queued' OR (jobs.status = 'scheduled' AND jobs.due_at <= now()))
       AND jobs.handler = ANY(%(handlers)s::text[])
 RETURNING jobs.id, jobs.user_id, jobs.shard_id, jobs.attempts, jobs.max_attempts,
           jobs.timeout_seconds, jobs.handler, jobs.handler_params, jobs.message,
           jobs.execute_at, jobs.due_at, jobs.created_at, jobs.attempt_errors
"""

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
