"""Every znode path the service uses, built in one place.

    ROOT/schedulers/members/<worker_id>   ephemeral; JSON {"host", "pid", "started"}
    ROOT/shards/<shard_id>/owner          ephemeral; the owning worker id (UTF-8)
    ROOT/executors/<worker_id>            ephemeral; JSON {"worker_id", "host", "pid",
                                          "started", "partitions"} (coordination.executors)

ROOT defaults to `/jobsvc`; tests give each case its own root so they cannot interfere.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_ROOT = "/jobsvc"


@dataclass(frozen=True)
class ZnodePaths:
    """The znode layout under one root."""

    root: str = DEFAULT_ROOT

    def __post_init__(self) -> None:
        if not self.root.startswith("/") or self.root.endswith("/"):
            raise ValueError(f"root must start with '/' and not end with one: {self.root!r}")

    @property
    def members(self) -> str:
        """Parent of the scheduler membership nodes; its children are worker ids."""
        return f"{self.root}/schedulers/members"

    def member(self, worker_id: str) -> str:
        """The ephemeral node that says `worker_id` is alive."""
        return f"{self.members}/{_node_name(worker_id)}"

    @property
    def executors(self) -> str:
        """Parent of the executor registration nodes; its children are worker ids."""
        return f"{self.root}/executors"

    def executor(self, worker_id: str) -> str:
        """The ephemeral node that says executor `worker_id` is alive, and what it reads."""
        return f"{self.executors}/{_node_name(worker_id)}"

    def shard_owner(self, shard_id: int) -> str:
        """The ephemeral node whose holder owns `shard_id`."""
        if shard_id < 0:
            raise ValueError(f"shard ids are not negative: {shard_id}")
        return f"{self.root}/shards/{shard_id}/owner"


def _node_name(worker_id: str) -> str:
    if not worker_id or "/" in worker_id or worker_id in {".", ".."}:
        raise ValueError(f"a worker id must be a single znode name: {worker_id!r}")
    return worker_id
