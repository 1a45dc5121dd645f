"""Prometheus metrics of an executor worker, served on ``JOBSVC_EXECUTOR_METRICS_PORT``."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# Seconds: job latency (finished - execute_at) is alerted at 10 s.
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0, 300.0)

JOBS_PROCESSED = Counter(
    "jobsvc_jobs_processed",
    "Messages handled, by outcome (dropped: duplicate, stale or cancelled; not_started: "
    "the handler could not begin, the job is due again)",
    ["outcome"],
)
JOB_LATENCY = Histogram(
    "jobsvc_job_latency_seconds",
    "Finished minus execute_at, for jobs that finished (succeeded or failed for good)",
    buckets=_LATENCY_BUCKETS,
)
JOB_START_DELAY = Histogram(
    "jobsvc_job_start_delay_seconds", "Attempt started minus due", buckets=_LATENCY_BUCKETS
)
ATTEMPT_DURATION = Histogram(
    "jobsvc_attempt_duration_seconds",
    "Handler run time per attempt",
    ["handler"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
CONSUMER_LAG = Gauge(
    "jobsvc_consumer_lag_messages", "Messages behind the partition's end", ["partition"]
)
IN_FLIGHT = Gauge("jobsvc_executor_in_flight", "Attempts running in this executor")
READ_AHEAD = Gauge(
    "jobsvc_executor_read_ahead_messages",
    "Jobs read and held: not due yet, or waiting for their turn in the weighted fair order",
)
CLOCK_OFFSET = Gauge(
    "jobsvc_executor_clock_offset_seconds",
    "Seconds the shard database's clock is ahead of this executor's (jobs are held by it)",
    ["shard"],
)
SHARD_FAILING = Gauge(
    "jobsvc_executor_shard_failing_seconds",
    "Seconds every claim or record on the shard has failed in a row (0 while it works)",
    ["shard"],
)
