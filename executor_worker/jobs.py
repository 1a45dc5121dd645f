"""A job an executor holds, from the message it read to the acknowledgement of its outcome.

Each part of the executor owns the jobs in its states (``JobState``: the part is named with
each). A job moves one way; its message's offset may be committed only once it is DONE.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from executor_worker.consumer import Received
from jobsvc.messaging.job_message import JobMessage


class JobState(Enum):
    NOT_DUE = "not_due"  # read before its due time; held until then (intake)
    WAITING = "waiting"  # due; waits for its turn in the weighted fair order (start order)
    CLAIMING = "claiming"  # taken in fair order; its attempt is being claimed (claimer)
    RUNNING = "running"  # claimed; its handler runs on a thread (handler pool)
    RECORDING = "recording"  # finished; its outcome waits to be written (recorder)
    DONE = "done"  # outcome durable, or nothing to run: the message is acknowledged


@dataclass(eq=False)
class HeldJob:
    """One message's job; ``inline``: its handler runs inside the claim's transaction."""

    message: JobMessage
    received: Received
    inline: bool
    state: JobState = field(default=JobState.WAITING)

    @property
    def key(self) -> tuple[str, int]:
        return (self.message.job_id, self.message.attempt)

    @property
    def shard_id(self) -> int:
        return self.message.shard_id

    @property
    def user_id(self) -> int:
        return self.message.user_id

    @property
    def weight(self) -> float:
        return self.message.weight

    @property
    def priority(self) -> int:
        return self.message.priority
