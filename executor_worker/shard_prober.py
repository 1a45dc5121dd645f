"""Asking the shards off the executor's loop, on a thread of its own: each one's clock every
``ShardClocks`` interval, and one that failed again whenever its backoff allows, until it
answers (the probe, ``read_database_clock``, reports to the backoff either way).

The loop uses only the shards that answer (``ShardBackoff.answering``): one whose claim,
record or probe failed has its jobs set aside until a probe here succeeds. A server that
vanished (its packets dropped) holds each try for a connection timeout here, not in the
loop, so the jobs of the other shards go on meanwhile.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable

from django.db import Error as DatabaseError
from django.db import connections

from executor_worker.shard_backoff import ShardBackoff
from executor_worker.shard_clocks import ShardClocks

logger = logging.getLogger(__name__)

_TICK = 0.05  # seconds between looks at which shards are due a probe


class ShardProber:
    def __init__(
        self, *, clocks: ShardClocks, shards: ShardBackoff, shard_ids: Callable[[], Iterable[int]]
    ) -> None:
        self.clocks = clocks
        self.shards = shards
        self._shard_ids = shard_ids
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shard-prober", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()

    def probe_due(self) -> None:
        shards = list(self._shard_ids())
        self.clocks.measure_due([shard for shard in shards if self.shards.answering(shard)])
        for shard in shards:
            if not self.shards.answering(shard) and self.shards.is_open(shard):
                with contextlib.suppress(DatabaseError):  # the probe reported it and backed off
                    self.clocks.measure(shard)

    def _run(self) -> None:
        while not self._stopping.wait(_TICK):
            try:
                self.probe_due()
            except Exception:  # a bug here must not leave failed shards closed for good
                logger.exception("probing the shards failed")
        connections.close_all()  # this thread's own
