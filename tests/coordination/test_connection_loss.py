"""ShardOwnership when the connection drops: SUSPENDED pauses, LOST releases and starts over.

Partitions go through a FaultProxy in front of the test ZooKeeper; a server crash uses a
private ZooKeeper the test kills and restarts.
"""

from __future__ import annotations

from coordination import ZnodePaths
from tests.waiting import wait_until

from .conftest import SESSION_TIMEOUT

ALL_SHARDS = frozenset(range(4))
SETTLE_TIMEOUT = 10.0  # seconds for live workers to converge
SUSPEND_TIMEOUT = 2.0  # seconds for a cut connection to be reported
# Reconnects back off to at most 1 s (coordination.client.RECONNECT_MAX_DELAY) plus jitter.
RECONNECT_TIMEOUT = 5.0  # seconds
# The server expires a silent session SESSION_TIMEOUT after it last heard from it, at its
# next tick (up to 2 s later on the local stack).
EXPIRY_TIMEOUT = SESSION_TIMEOUT + 4.0  # seconds
SERVER_RESTART_TIMEOUT = 60.0  # seconds for the JVM to come back


def test_a_short_partition_suspends_then_resumes_with_the_same_session(
    make_ownership, make_client, fault_proxy
):
    client = make_client(fault_proxy.hosts)
    a, recorder = make_ownership("a", client=client)
    wait_until(lambda: a.owned() == ALL_SHARDS, timeout=SETTLE_TIMEOUT, what="a owns all")
    session = client.client_id[0]

    fault_proxy.cut()
    wait_until(lambda: "suspended" in recorder.kinds(), timeout=SUSPEND_TIMEOUT, what="suspended")
    assert a.owned() == ALL_SHARDS  # paused, not released: the nodes are still ours
    fault_proxy.restore()
    wait_until(lambda: "resumed" in recorder.kinds(), timeout=RECONNECT_TIMEOUT, what="resumed")

    assert client.client_id[0] == session
    assert a.owned() == ALL_SHARDS
    assert recorder.kinds().count("released") == 0
    assert recorder.kinds()[-2:] == ["suspended", "resumed"]


def test_an_expired_session_releases_everything_then_starts_over(
    make_ownership, make_client, fault_proxy, observer, zk_root, ownership_log
):
    client = make_client(fault_proxy.hosts)
    a, recorder_a = make_ownership("a", client=client)
    b, _ = make_ownership("b")
    wait_until(
        lambda: len(a.owned()) == 2 and len(b.owned()) == 2,
        timeout=SETTLE_TIMEOUT,
        what="two shards each",
    )
    session = client.client_id[0]

    fault_proxy.cut()
    wait_until(lambda: "suspended" in recorder_a.kinds(), timeout=SUSPEND_TIMEOUT, what="suspended")
    # The server expires a's session; b takes a's shards although a has not heard yet.
    wait_until(
        lambda: b.owned() == ALL_SHARDS,
        timeout=EXPIRY_TIMEOUT,
        what="b owns the shards of the expired session",
    )
    assert observer.exists(ZnodePaths(zk_root).member("a")) is None
    assert len(a.owned()) == 2  # still paused: it learns of the expiry on reconnecting

    fault_proxy.restore()
    wait_until(
        lambda: len(a.owned()) == 2 and len(b.owned()) == 2,
        timeout=RECONNECT_TIMEOUT + SETTLE_TIMEOUT,
        what="a back with a new session and two shards",
    )

    assert client.client_id[0] != session
    kinds = recorder_a.kinds()
    after_cut = kinds[kinds.index("suspended") :]
    assert after_cut[:4] == ["suspended", "released", "released", "resumed"]
    assert after_cut[4:] == ["acquired", "acquired"]
    assert ownership_log.active_overlaps() == []


def test_workers_start_over_on_a_zookeeper_restored_without_its_data(
    make_ownership, make_client, private_zookeeper, ownership_log
):
    """A server that lost its data refuses clients that saw later transactions than its
    own; kazoo would retry that forever. The workers must give up the old session and
    share the shards again on the empty server."""
    limit = {"suspended_limit": 2 * SESSION_TIMEOUT}
    a, recorder_a = make_ownership("a", client=make_client(private_zookeeper.hosts), **limit)
    b, recorder_b = make_ownership("b", client=make_client(private_zookeeper.hosts), **limit)
    wait_until(
        lambda: len(a.owned()) == 2 and len(b.owned()) == 2,
        timeout=SETTLE_TIMEOUT,
        what="two shards each",
    )

    private_zookeeper.kill()
    private_zookeeper.wipe()
    private_zookeeper.start()

    wait_until(
        lambda: "released" in recorder_a.kinds() and "released" in recorder_b.kinds(),
        timeout=SERVER_RESTART_TIMEOUT,
        what="both gave up the old session's shards",
    )
    wait_until(
        lambda: len(a.owned()) == 2 and len(b.owned()) == 2,
        timeout=SERVER_RESTART_TIMEOUT,
        what="two shards each on the new server",
    )
    assert ownership_log.active_overlaps() == []


def test_a_zookeeper_restart_suspends_and_resumes_without_losing_a_shard(
    make_ownership, make_client, private_zookeeper
):
    a, recorder_a = make_ownership("a", client=make_client(private_zookeeper.hosts))
    b, recorder_b = make_ownership("b", client=make_client(private_zookeeper.hosts))
    wait_until(
        lambda: len(a.owned()) == 2 and len(b.owned()) == 2,
        timeout=SETTLE_TIMEOUT,
        what="two shards each",
    )
    before = (a.owned(), b.owned())

    private_zookeeper.kill()
    wait_until(
        lambda: "suspended" in recorder_a.kinds() and "suspended" in recorder_b.kinds(),
        timeout=SUSPEND_TIMEOUT,
        what="both suspended",
    )
    # The restarted server reloads the sessions from its log and gives them a fresh timeout.
    private_zookeeper.start()
    wait_until(
        lambda: "resumed" in recorder_a.kinds() and "resumed" in recorder_b.kinds(),
        timeout=SERVER_RESTART_TIMEOUT,
        what="both resumed",
    )

    # A session survives when its client reconnects within a session timeout of the
    # server's reload. On a loaded 2-core machine a reconnect can hang that long in a read
    # of the still-starting server (seen: 4 s, then "Session has expired"). The worker then
    # releases its shards, and the promise left is the one that matters for dispatch:
    # every shard owned again, never by two active workers at once.
    after = {r.worker: r.kinds()[r.kinds().index("suspended") :] for r in (recorder_a, recorder_b)}
    if all(kinds == ["suspended", "resumed"] for kinds in after.values()):
        assert (a.owned(), b.owned()) == before
    else:
        assert any("released" in kinds for kinds in after.values()), after
        wait_until(
            lambda: a.owned() | b.owned() == ALL_SHARDS and not a.owned() & b.owned(),
            timeout=SETTLE_TIMEOUT,
            what="every shard owned by one worker after a session expired",
        )
    assert recorder_a.log.active_overlaps() == []
