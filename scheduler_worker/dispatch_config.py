"""How a scheduler worker dispatches each shard it owns (run_scheduler's settings)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DispatchConfig:
    topic: str
    dead_letter_topic: str
    max_in_flight: int  # per shard, shared by weight among the users with jobs due
    poll_interval: float  # seconds from a round's start to the next
    queued_timeout: float  # seconds a published job may stay unclaimed
    sweep_interval: float  # seconds between sweeps for lost messages and executors
    publish_timeout: float  # seconds for the broker to acknowledge a message, or it fails
    # Seconds before its due time a job may be dispatched; the executor holds it until it
    # is due. 0: only jobs already due.
    dispatch_ahead: float = 0.0
    in_flight_seconds: float = 0.0  # the limit: finish rate x this, up to max_in_flight; 0: max
