"""The kept-connection health check reads the socket instead of sending `SELECT 1`."""

from __future__ import annotations

import socket

import pytest

from jobsvc.postgresql.base import _has_unread_data


@pytest.fixture
def socket_pair():
    ours, theirs = socket.socketpair()
    yield ours, theirs
    ours.close()
    theirs.close()


def test_an_idle_connection_has_nothing_to_read(socket_pair):
    ours, _ = socket_pair
    assert not _has_unread_data(ours.fileno())


def test_a_message_the_client_did_not_ask_for_means_the_session_ended(socket_pair):
    ours, theirs = socket_pair
    theirs.sendall(b"E\x00\x00\x00\x10SFATAL\x00")  # PostgreSQL's FATAL error, shortened
    assert _has_unread_data(ours.fileno())


def test_a_socket_the_server_closed_is_readable(socket_pair):
    ours, theirs = socket_pair
    theirs.close()
    assert _has_unread_data(ours.fileno())


def test_a_closed_descriptor_counts_as_gone():
    ours, theirs = socket.socketpair()
    fileno = ours.fileno()
    ours.close()
    theirs.close()
    assert _has_unread_data(fileno)
