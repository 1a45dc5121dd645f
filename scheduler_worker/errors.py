"""Errors of the scheduler worker.

SchedulerError
└── ShardFenced     another worker took the shard over; stop writing to it
"""

from __future__ import annotations


class SchedulerError(Exception):
    """Root of the scheduler worker's errors."""


class ShardFenced(SchedulerError):
    """The shard's lease epoch is no longer ours: another worker owns the shard now."""
