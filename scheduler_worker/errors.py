"""Errors of the scheduler worker."""

from __future__ import annotations


class SchedulerError(Exception):
    """Root of the scheduler worker's errors."""


class ShardFenced(SchedulerError):
    """The shard's lease epoch is no longer ours: another worker owns the shard now."""


class MessagesNotAcknowledged(SchedulerError):
    """The broker did not acknowledge a round's messages in time: their jobs are due again."""
