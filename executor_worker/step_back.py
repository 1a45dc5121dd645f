"""When an executor leaves the consumer group because it cannot reach a shard, and when it
joins again.

An executor that cannot reach a shard sets that shard's jobs aside (``ShardBackoff``) and
runs the others. If every claim, record and clock probe there has failed for ``after``
seconds while another member of the group holds partitions and reached the shard lately
(the executors' ZooKeeper records, ``coordination.executors``), it leaves the group: its
partitions, and the jobs it held, go to the members that can run them.

Out of the group it goes on probing the shards, and joins again as soon as:

- no shard has failed here for ``after`` seconds any more (a probe succeeded:
  ``ShardBackoff``);
- or no member is left that holds partitions and reaches the shards that still fail
  here: that member died, lost its partitions when it was cut off from the broker, or
  lost the shards too. Out of the group this executor runs nothing; in it, it runs at
  least the jobs of the shards it reaches. That takes two reads of the records in a row,
  so that a member caught between giving up its partitions and being given new ones in a
  rebalance does not call it back;
- or ``seconds`` have passed (the records cannot be read, for instance). If the shards
  still fail here then, it leaves again at its next look.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from coordination.executors import ExecutorRecord
from executor_worker.shard_backoff import ShardBackoff

logger = logging.getLogger(__name__)

_CHECK_INTERVAL = 1.0  # seconds between looks, in the group, at which shards fail here
# A shard counts as reached by this executor (for others deciding to leave the group) if a
# claim, record or clock probe succeeded there this recently and nothing failed since.
REACHED_WITHIN = 10.0
_RECORDS_MAX_AGE = REACHED_WITHIN  # seconds; older records of the others are not trusted


class Peers(Protocol):
    """What the executor tells other executors, and reads of them
    (``coordination.executors.ExecutorRegistration``)."""

    def shards_reachable(self, shards: Iterable[int]) -> None: ...

    def peers(self) -> tuple[float, list[ExecutorRecord]] | None: ...


class StepBack:
    """Decides, turn by turn, whether the executor leaves the group or joins it again.

    ``peers`` None or ``after`` 0: it never leaves. ``clock``: ``time.monotonic``, the
    clock of ``shards`` and of the records' read times."""

    def __init__(
        self,
        *,
        peers: Peers | None,
        shards: ShardBackoff,
        after: float,
        seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.after = after  # seconds a shard fails here before leaving (0: never)
        self.seconds = seconds  # seconds out of the group at most
        self._peers = peers
        self._shards = shards
        self._clock = clock
        self._next_check = 0.0
        self._rejoin_at: float | None = None  # while out: when to join again at the latest
        self._first_unable_read: float | None = None  # while out: a read showing none able

    @property
    def out(self) -> bool:
        """Whether the executor is out of the group (it has left and not joined again)."""
        return self._rejoin_at is not None

    def should_leave(self) -> bool:
        """In the group: tell the others which shards this executor reached lately; True
        (and say so) if it should leave now, for a shard it cannot reach while another
        member holds partitions and reaches it. At most once per ``_CHECK_INTERVAL``."""
        now = self._clock()
        if self._peers is None or not self.after or now < self._next_check:
            return False
        self._next_check = now + _CHECK_INTERVAL
        self._peers.shards_reachable(self._shards.reached(within=REACHED_WITHIN))
        stuck = self._stuck()
        read = self._fresh_records() if stuck else None
        able = _able(read[1], stuck) if read is not None else []
        if not able:
            return False
        logger.error(
            "shards %s: every claim and record failed for %.0f s here while %s reached them: "
            "leaving the consumer group for up to %.0f s so that they run their jobs",
            sorted(stuck),
            self.after,
            ", ".join(able),
            self.seconds,
            extra={"action": "step_back"},
        )
        self._rejoin_at = now + self.seconds
        self._first_unable_read = None
        return True

    def should_rejoin(self) -> bool:
        """Out of the group: True (and say why) if it should join again now."""
        if self._rejoin_at is None:
            return False
        stuck = self._stuck()
        if not stuck:
            reason = "every shard answers here again"
        elif self._clock() >= self._rejoin_at:
            reason = f"{self.seconds:.0f} s out"
        elif self._none_able_twice(stuck):
            reason = f"no other executor holding partitions reaches shards {sorted(stuck)}"
        else:
            return False
        logger.info("joining the consumer group again: %s", reason, extra={"action": "rejoin"})
        self._rejoin_at = None
        return True

    def _stuck(self) -> frozenset[int]:
        """The shards that have failed here for ``after`` seconds or more."""
        failing = self._shards.failing_for()
        return frozenset(shard for shard, seconds in failing.items() if seconds >= self.after)

    def _none_able_twice(self, stuck: frozenset[int]) -> bool:
        """Two reads of the records in a row show no member able to take ``stuck``."""
        read = self._fresh_records()
        if read is None:
            return False
        read_at, records = read
        if _able(records, stuck):
            self._first_unable_read = None
            return False
        if self._first_unable_read is None:
            self._first_unable_read = read_at
        return read_at > self._first_unable_read

    def _fresh_records(self) -> tuple[float, list[ExecutorRecord]] | None:
        read = self._peers.peers() if self._peers is not None else None
        if read is None or read[0] < self._clock() - _RECORDS_MAX_AGE:
            return None
        return read


def _able(records: list[ExecutorRecord], stuck: frozenset[int]) -> list[str]:
    """The members that hold partitions and reached every one of ``stuck`` lately."""
    return [r.worker_id for r in records if r.partitions and stuck <= set(r.reachable_shards)]
