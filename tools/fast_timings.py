"""Worker settings under which a failure's consequences are repaired within seconds.

The production defaults (jobsvc/settings.py) are tuned for steady operation: a ZooKeeper
session of 5 s, a retry backoff up to 300 s, a running lease of 6 s. The end-to-end tests,
the fault campaign (tools/chaos) and the failover benchmark kill and pause workers on
purpose and wait for the system to heal, so they run the workers with these instead.
"""

from __future__ import annotations

from tools.webhook_receiver import LOOPBACK_WEBHOOKS

ZK_SESSION_SECONDS = 4.0

FAST_FAILURE_TIMINGS = {
    "JOBSVC_SCHEDULER_SWEEP_INTERVAL_SECONDS": "0.5",
    "JOBSVC_ZK_SESSION_TIMEOUT_SECONDS": f"{ZK_SESSION_SECONDS:g}",
    "JOBSVC_RETRY_BASE_DELAY_SECONDS": "0.2",
    "JOBSVC_RETRY_MAX_DELAY_SECONDS": "1",
    "JOBSVC_EXECUTOR_LEASE_SECONDS": "2",
    "JOBSVC_EXECUTOR_DRAIN_TIMEOUT_SECONDS": "5",
    **LOOPBACK_WEBHOOKS,
}
