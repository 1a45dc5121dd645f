"""A scheduler-like member in its own process, for tests that SIGKILL a worker.

    python -m tests.coordination.member_process HOSTS ROOT WORKER_ID SHARDS SESSION_TIMEOUT

SHARDS is comma-separated. Prints `owned 0,2` (sorted, possibly empty) after every change,
then runs until killed.
"""

from __future__ import annotations

import sys
import threading

from coordination import ShardOwnership, connect

CONNECT_TIMEOUT = 10.0  # seconds


def main(hosts: str, root: str, worker_id: str, shards: str, session_timeout: str) -> None:
    client = connect(hosts, session_timeout=float(session_timeout), connect_timeout=CONNECT_TIMEOUT)
    owned: set[int] = set()

    def report() -> None:
        print("owned " + ",".join(map(str, sorted(owned))), flush=True)

    def acquired(shard_id: int) -> None:
        owned.add(shard_id)
        report()

    def released(shard_id: int) -> None:
        owned.discard(shard_id)
        report()

    ShardOwnership(
        client,
        worker_id=worker_id,
        shard_ids=[int(shard) for shard in shards.split(",")],
        on_acquired=acquired,
        on_released=released,
        on_suspended=lambda: None,
        on_resumed=lambda: None,
        root=root,
    ).start()
    report()
    threading.Event().wait()


if __name__ == "__main__":
    main(*sys.argv[1:])
