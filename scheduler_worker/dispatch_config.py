"""How a scheduler worker dispatches each shard it owns (run_scheduler's settings)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DispatchConfig:
    topic: str
    dead_letter_topic: str
    batch_size: int  # jobs per round
    max_in_flight: int  # per shard; 0 = no cap
    poll_interval: float  # seconds from a round's start to the next, when nothing was left
    queued_timeout: float  # seconds a published job may stay unclaimed
    sweep_interval: float  # seconds between sweeps for lost messages and executors
    publish_timeout: float  # seconds for the broker to acknowledge a message, or it fails
    # Seconds a published job should wait for an executor at most; the in-flight limit
    # follows it below max_in_flight (scheduler_worker.in_flight). 0: the fixed cap only.
    target_queue_wait: float = 0.0
    # Seconds before its due time a job may be dispatched; the executor holds it until it
    # is due (executor_worker.not_due). 0: only jobs already due.
    dispatch_ahead: float = 0.0
    # Where the jobs of a user with few in flight on the shard go
    # (scheduler_worker.express_lane); "" or a topic the broker does not know: the jobs
    # topic, like every other job.
    express_topic: str = ""
    # Listen on the shard's database for jobs created due now (jobsvc.jobs.due_now) and
    # send those of users with few in flight express at once (``dispatch_express``).
    listen_for_due: bool = False
    # A round claims at least this many jobs per due user when that is more than
    # ``batch_size`` (scheduler_worker.shard_rounds.round_size). 0: ``batch_size`` only.
    round_jobs_per_user: int = 0
