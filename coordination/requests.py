"""One ZooKeeper request at a time from a recipe's own thread, given up when the link drops.

Shard ownership and executor registration each run their ZooKeeper work on one thread
that must also handle SUSPENDED and LOST. A request sent while kazoo is reconnecting
waits in kazoo's queue until the connection is back, which would keep that thread from
handling them, so ``wait_for`` watches the connection while it waits.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, SessionExpiredError
from kazoo.interfaces import IAsyncResult

LINK_CHECK_INTERVAL = 0.05  # seconds between connection checks while a request is pending

# The connection or session is gone; the state listener has queued SUSPENDED or LOST, and
# the recipe goes on when it is CONNECTED again.
LINK_ERRORS = (ConnectionLoss, SessionExpiredError, ConnectionClosedError)


class LinkDown(Exception):
    """The connection dropped while a request was pending; its outcome is unknown."""


def wait_for(client: KazooClient, request: IAsyncResult):
    """The request's result; ``LinkDown`` as soon as the connection drops."""
    while not request.wait(LINK_CHECK_INTERVAL):
        if not client.connected:  # cleared by kazoo before it reports SUSPENDED
            raise LinkDown()
    return request.get()
