"""A job's statuses in SQL, and the SQL every writer shares: one place for each fact.

The schedulers' and executors' named queries (``scheduler_worker/queries.py``,
``executor_worker/queries.py``) spell statuses through these constants, and append to a
job's ``attempt_errors`` through ``APPEND_ATTEMPT_ERROR``, which keeps at most
``MAX_ATTEMPT_ERRORS`` entries (the oldest goes first): a job retried again and again, by
its handler or by its owner over the API, cannot grow its row without bound.
"""

from __future__ import annotations

from jobsvc.jobs.models import JobStatus

# Entries of attempt_errors kept per job; each entry's error is bounded by the executor
# (executor_worker.runner) and the sweeper (a fixed text).
MAX_ATTEMPT_ERRORS = 25


def _literal(status: JobStatus) -> str:
    return f"'{status.value}'"


SCHEDULED = _literal(JobStatus.SCHEDULED)
QUEUED = _literal(JobStatus.QUEUED)
RUNNING = _literal(JobStatus.RUNNING)
SUCCEEDED = _literal(JobStatus.SUCCEEDED)
FAILED = _literal(JobStatus.FAILED)
CANCELLED = _literal(JobStatus.CANCELLED)
IN_FLIGHT = f"({QUEUED}, {RUNNING})"  # published, not finished
STARTABLE = f"({QUEUED}, {SCHEDULED})"  # a claim may start it (see executor_worker)
FINISHED = f"({SUCCEEDED}, {FAILED}, {CANCELLED})"


def append_attempt_error(*, attempt: str, error: str) -> str:
    """The SET clause that appends ``{attempt, error, at}`` (SQL expressions) to the job's
    ``attempt_errors``, dropping the oldest entry once ``MAX_ATTEMPT_ERRORS`` are kept."""
    return (
        "attempt_errors = CASE WHEN jsonb_array_length(jobs.attempt_errors) >= "
        f"{MAX_ATTEMPT_ERRORS} THEN jobs.attempt_errors - 0 ELSE jobs.attempt_errors END"
        " || jsonb_build_array(jsonb_build_object("
        f"'attempt', {attempt}, 'error', {error}, 'at', now()))"
    )
