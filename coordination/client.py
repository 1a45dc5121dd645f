"""Connecting to ZooKeeper: one KazooClient per worker process, with a reconnect policy.

kazoo reconnects on its own and keeps the session while it can: the connection retry below
never gives up, so a ZooKeeper outage shows up as SUSPENDED (and LOST once the session has
expired), never as a client that silently stopped trying.

With ``auth`` the client authenticates as a ZooKeeper user (SASL DIGEST-MD5), and every
znode it creates is readable and writable by that user alone: another client on the
network can neither read the shard ownership nor rewrite it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry
from kazoo.security import ACL, make_acl

from .errors import CoordinationUnavailable

logger = logging.getLogger(__name__)

RECONNECT_DELAY = 0.1  # seconds before the first reconnect attempt, doubled per failure
RECONNECT_MAX_DELAY = 1.0  # seconds; short, so a session outlives a brief outage
COMMAND_TRIES = 3  # attempts of a command run through `client.retry(...)`
COMMAND_MAX_DELAY = 1.0  # seconds between those attempts at most


@dataclass(frozen=True)
class SaslAuth:
    """A ZooKeeper user and its password (SASL DIGEST-MD5)."""

    username: str
    password: str = ""

    def __repr__(self) -> str:  # never the password, in a log or a traceback
        return f"SaslAuth(username={self.username!r})"


def client_options(auth: SaslAuth | None) -> dict:
    """KazooClient keyword arguments for ``auth``: the SASL login, and ACLs that give the
    znodes it creates to that user only. None: no authentication, open ACLs."""
    if auth is None:
        return {}
    acl: list[ACL] = [make_acl("sasl", auth.username, all=True)]
    return {
        "sasl_options": {
            "mechanism": "DIGEST-MD5",
            "username": auth.username,
            "password": auth.password,
        },
        "default_acl": acl,
    }


def connect(
    hosts: str, *, session_timeout: float, connect_timeout: float, auth: SaslAuth | None = None
) -> KazooClient:
    """Start a client and wait until it is connected.

    `session_timeout` (seconds) is a request: the server clamps it to between 2 and 20
    ticks. Raises `CoordinationUnavailable` if no server answers within `connect_timeout`
    seconds; the half-started client is stopped first.
    """
    if connect_timeout <= 0:
        raise ValueError("session_timeout and connect_timeout must be positive")
    client = _client(hosts, session_timeout, auth)
    try:
        # On a time-out kazoo stops and closes the client itself before raising.
        client.start(timeout=connect_timeout)
    except KazooTimeoutError as exc:
        raise CoordinationUnavailable(
            f"no ZooKeeper server at {hosts} answered within {connect_timeout} s"
        ) from exc
    logger.info("connected to ZooKeeper", extra={"hosts": hosts})
    return client


def connect_in_background(
    hosts: str, *, session_timeout: float, auth: SaslAuth | None = None
) -> KazooClient:
    """Start a client that connects (and reconnects) in the background; never waits.

    For a process whose work must go on without ZooKeeper: the client is returned at once,
    whether or not a server answers, and kazoo keeps trying with the policy above. Watch
    its state with a listener (CONNECTED comes once a server answers).
    """
    client = _client(hosts, session_timeout, auth)
    client.start_async()
    logger.info("connecting to ZooKeeper in the background", extra={"hosts": hosts})
    return client


def disconnect(client: KazooClient) -> None:
    """End the session (its ephemeral nodes go with it) and the client's threads.

    A client that does not stop in time is logged, not raised: its threads are daemons,
    and the caller is on its way out.
    """
    try:
        client.stop()
        client.close()
    except KazooException as exc:
        logger.warning("stopping the ZooKeeper client failed: %s", exc)


def _client(hosts: str, session_timeout: float, auth: SaslAuth | None) -> KazooClient:
    if not hosts:
        raise ValueError("hosts must name at least one ZooKeeper server")
    if session_timeout <= 0:
        raise ValueError("session_timeout and connect_timeout must be positive")
    return KazooClient(
        hosts=hosts,
        timeout=session_timeout,
        connection_retry=KazooRetry(
            max_tries=-1, delay=RECONNECT_DELAY, max_delay=RECONNECT_MAX_DELAY
        ),
        command_retry=KazooRetry(max_tries=COMMAND_TRIES, max_delay=COMMAND_MAX_DELAY),
        **client_options(auth),
    )
