"""ShardOwnership against a real ZooKeeper: splitting, handing over, joining, dying."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

from kazoo.exceptions import NoNodeError

from coordination import ZnodePaths
from tests.waiting import wait_until

from .conftest import SESSION_TIMEOUT

ALL_SHARDS = frozenset(range(4))
SETTLE_TIMEOUT = 10.0  # seconds for live workers to converge (no session has to expire)
HANDOVER_TIMEOUT = 3.0  # seconds for a clean stop to reach the survivors
# A killed worker's session expires after SESSION_TIMEOUT, rounded up to the server's
# tick (2 s on the local stack); then the survivors need a round trip or two.
TAKEOVER_MARGIN = 3.0  # seconds
REPO_ROOT = Path(__file__).resolve().parents[2]


def owner_nodes(observer, root: str, shard_ids=ALL_SHARDS) -> dict[int, str | None]:
    """The worker id in each shard's owner node (None where there is no node)."""
    paths, owners = ZnodePaths(root), {}
    for shard_id in shard_ids:
        try:
            data, _ = observer.get(paths.shard_owner(shard_id))
            owners[shard_id] = data.decode()
        except NoNodeError:
            owners[shard_id] = None
    return owners


def test_two_workers_split_four_shards_two_each(make_ownership, observer, zk_root):
    a, _ = make_ownership("a")
    b, _ = make_ownership("b")

    wait_until(
        lambda: len(a.owned()) == 2 and len(b.owned()) == 2,
        timeout=SETTLE_TIMEOUT,
        what="two shards each",
    )

    assert a.owned() | b.owned() == ALL_SHARDS
    assert not a.owned() & b.owned()
    owners = owner_nodes(observer, zk_root)
    assert {shard for shard, owner in owners.items() if owner == "a"} == a.owned()
    assert {shard for shard, owner in owners.items() if owner == "b"} == b.owned()


def test_the_member_node_names_host_pid_and_start(make_ownership, observer, zk_root):
    a, _ = make_ownership("a")
    wait_until(lambda: a.owned() == ALL_SHARDS, timeout=SETTLE_TIMEOUT, what="a owns all")

    data, stat = observer.get(ZnodePaths(zk_root).member("a"))

    assert set(json.loads(data)) == {"host", "pid", "started"}
    assert json.loads(data)["pid"] == os.getpid()
    assert stat.ephemeralOwner != 0


def test_when_one_worker_stops_the_other_owns_every_shard(
    make_ownership, observer, zk_root, ownership_log
):
    a, recorder_a = make_ownership("a")
    b, _ = make_ownership("b")
    wait_until(
        lambda: len(a.owned()) == 2 and len(b.owned()) == 2,
        timeout=SETTLE_TIMEOUT,
        what="two shards each",
    )
    a_had, seen = a.owned(), len(recorder_a.events())

    assert a.stop()
    handover = wait_until(lambda: b.owned() == ALL_SHARDS, timeout=HANDOVER_TIMEOUT, what="b all")

    assert a.owned() == frozenset()
    assert recorder_a.events()[seen:] == [("released", shard) for shard in sorted(a_had)]
    assert not observer.exists(ZnodePaths(zk_root).member("a"))
    assert set(owner_nodes(observer, zk_root).values()) == {"b"}
    assert ownership_log.active_overlaps() == []
    assert handover < HANDOVER_TIMEOUT


def test_a_third_worker_joins_without_two_owners_at_any_moment(
    make_ownership, observer, zk_root, ownership_log
):
    workers = {name: make_ownership(name)[0] for name in ("a", "b")}
    wait_until(
        lambda: sum(len(w.owned()) for w in workers.values()) == 4,
        timeout=SETTLE_TIMEOUT,
        what="a and b own all",
    )

    workers["c"] = make_ownership("c")[0]

    def settled() -> bool:
        before = {name: worker.owned() for name, worker in workers.items()}
        nodes = owner_nodes(observer, zk_root)
        after = {name: worker.owned() for name, worker in workers.items()}
        for snapshot in (before, after):
            held = [shard for shards in snapshot.values() for shard in shards]
            assert len(held) == len(set(held)), f"two workers own a shard: {snapshot}"
        for name in workers:
            for shard_id in before[name] & after[name]:
                assert nodes[shard_id] == name, f"{name} owns {shard_id}, node says {nodes}"
        return sorted(len(shards) for shards in after.values()) == [1, 1, 2] and set(
            nodes.values()
        ) == {"a", "b", "c"}

    wait_until(settled, timeout=SETTLE_TIMEOUT, what="a, b and c hold 2, 1 and 1")
    assert ownership_log.active_overlaps() == []


def test_a_busy_owner_node_is_taken_as_soon_as_it_is_deleted(make_ownership, make_client, zk_root):
    squatter = make_client()
    path = ZnodePaths(zk_root).shard_owner(0)
    squatter.create(path, b"someone-else", ephemeral=True, makepath=True)
    a, recorder = make_ownership("a", shard_ids=[0, 1])
    wait_until(lambda: a.owned() == {1}, timeout=SETTLE_TIMEOUT, what="a owns shard 1")

    squatter.delete(path)

    wait_until(lambda: a.owned() == {0, 1}, timeout=HANDOVER_TIMEOUT, what="a owns shard 0")
    assert recorder.events().count(("acquired", 0)) == 1


def test_an_on_acquired_that_raises_leaves_the_shard_unowned_and_is_retried(
    make_ownership, observer, zk_root
):
    attempts = []

    def flaky_acquired(shard_id: int) -> None:
        attempts.append(shard_id)
        if len(attempts) == 1:
            raise RuntimeError("shard database unreachable")

    a, _ = make_ownership("a", shard_ids=[5], on_acquired=flaky_acquired)

    wait_until(lambda: a.owned() == {5}, timeout=SETTLE_TIMEOUT, what="a owns shard 5")
    assert attempts == [5, 5]
    assert owner_nodes(observer, zk_root, [5]) == {5: "a"}


def test_stop_is_idempotent_and_harmless_before_start(make_ownership, observer, zk_root):
    never_started, _ = make_ownership("idle", start=False)
    assert never_started.stop()
    assert never_started.stop()
    a, recorder = make_ownership("a")
    wait_until(lambda: a.owned() == ALL_SHARDS, timeout=SETTLE_TIMEOUT, what="a owns all")

    assert a.stop()
    assert a.stop()

    assert recorder.kinds().count("released") == 4
    assert set(owner_nodes(observer, zk_root).values()) == {None}


def test_stop_from_a_signal_handler_releases_everything(make_ownership, observer, zk_root):
    a, recorder = make_ownership("a")
    wait_until(lambda: a.owned() == ALL_SHARDS, timeout=SETTLE_TIMEOUT, what="a owns all")
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: a.stop())
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
    finally:
        signal.signal(signal.SIGUSR1, previous)

    wait_until(
        lambda: set(owner_nodes(observer, zk_root).values()) == {None},
        timeout=HANDOVER_TIMEOUT,
        what="owner nodes deleted",
    )
    assert a.owned() == frozenset()
    assert recorder.kinds().count("released") == 4


def test_a_killed_worker_s_shards_move_within_the_session_timeout(
    make_ownership, zk_hosts, zk_root, record_property
):
    survivor, _ = make_ownership("survivor")
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.coordination.member_process",
            zk_hosts,
            zk_root,
            "doomed",
            ",".join(map(str, sorted(ALL_SHARDS))),
            str(SESSION_TIMEOUT),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        reports = _lines_of(child)
        child_owns: list[frozenset[int]] = [frozenset()]

        def split_in_two() -> bool:
            while not reports.empty():
                line = reports.get_nowait()
                shards = line.removeprefix("owned ").strip()
                child_owns[0] = frozenset(int(s) for s in shards.split(",") if s)
            return len(child_owns[0]) == 2 and survivor.owned() == ALL_SHARDS - child_owns[0]

        wait_until(split_in_two, timeout=SETTLE_TIMEOUT, what="survivor and child own two each")

        child.send_signal(signal.SIGKILL)
        child.wait()
        takeover = wait_until(
            lambda: survivor.owned() == ALL_SHARDS,
            timeout=SESSION_TIMEOUT + TAKEOVER_MARGIN,
            what="survivor owns the killed worker's shards",
        )
    finally:
        child.kill()
        child.wait()
        child.stdout.close()

    record_property("takeover_seconds", round(takeover, 2))
    print(f"takeover after SIGKILL: {takeover:.2f} s (session timeout {SESSION_TIMEOUT} s)")


def _lines_of(process: subprocess.Popen) -> queue.SimpleQueue[str]:
    lines: queue.SimpleQueue[str] = queue.SimpleQueue()

    def read() -> None:
        for line in process.stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines
