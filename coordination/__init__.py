"""ZooKeeper coordination: which scheduler worker owns which shard.

The only package that imports kazoo; it never imports Django (workers pass their settings
in through constructors).
"""

from __future__ import annotations

from .assignment import assign_shards
from .client import connect
from .errors import CoordinationError, CoordinationUnavailable
from .paths import DEFAULT_ROOT, ZnodePaths
from .shard_ownership import ShardOwnership

__all__ = [
    "DEFAULT_ROOT",
    "CoordinationError",
    "CoordinationUnavailable",
    "ShardOwnership",
    "ZnodePaths",
    "assign_shards",
    "connect",
]
