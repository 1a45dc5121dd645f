"""Errors of the scheduler worker."""

from __future__ import annotations


class ShardFenced(Exception):
    """The shard's lease epoch is no longer ours: another worker owns the shard now."""


class MessagesNotAcknowledged(Exception):
    """The broker did not acknowledge a round's messages in time: their jobs are due again."""
