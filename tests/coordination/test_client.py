"""connect(): a started client, or CoordinationUnavailable."""

from __future__ import annotations

import socket
import time

import pytest
from kazoo.protocol.states import KazooState

from coordination import CoordinationUnavailable, connect


def test_connect_returns_a_connected_client(make_client):
    client = make_client()

    assert client.state == KazooState.CONNECTED
    assert client.exists("/") is not None


def test_no_server_raises_coordination_unavailable_within_the_connect_timeout():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        hosts = f"127.0.0.1:{sock.getsockname()[1]}"
    started = time.monotonic()

    with pytest.raises(CoordinationUnavailable):
        connect(hosts, session_timeout=4.0, connect_timeout=0.5)

    assert time.monotonic() - started < 3.0


@pytest.mark.parametrize(
    "kwargs",
    [{"session_timeout": 0, "connect_timeout": 1}, {"session_timeout": 4, "connect_timeout": -1}],
)
def test_timeouts_must_be_positive(kwargs):
    with pytest.raises(ValueError):
        connect("127.0.0.1:2181", **kwargs)
