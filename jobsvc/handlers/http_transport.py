"""One HTTP(S) request over a connection pinned to checked addresses, within a deadline.

``post()`` connects to one of the given IP addresses itself, so the peer is an address
the caller checked, while the ``Host`` header, TLS SNI and certificate check use the
host name (``http.client`` with ``connect()`` overridden).

The deadline is hard: every socket read and write first sets the socket's timeout to the
time left (``_DeadlineMixin``), so a peer that trickles bytes cannot stretch a request
past it. TLS sockets get the same behaviour through ``SSLContext.sslsocket_class``.

Errors are the standard library's: ``TimeoutError`` once the deadline passes, other
``OSError`` (refused, reset, TLS) and ``http.client.HTTPException`` (a garbled answer).
The handler translates them.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jobsvc.handlers.http_policy import DEFAULT_PORTS, Target


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    retry_after: str | None  # the Retry-After header, as sent
    # The first bytes of the answer's body (at most ``excerpt_bytes`` of ``post``).
    body_excerpt: bytes = b""


def tls_context(*, ca_file: str | None = None) -> ssl.SSLContext:
    """A verifying client context (system CAs, or ``ca_file``) whose sockets keep deadlines."""
    context = ssl.create_default_context(cafile=ca_file)
    context.sslsocket_class = _DeadlineSSLSocket
    return context


def post(
    target: Target,
    addresses: Sequence[str],
    *,
    body: bytes,
    headers: dict[str, str],
    deadline: float,
    tls: ssl.SSLContext,
    clock: Callable[[], float] = time.monotonic,
    method: str = "POST",
    excerpt_bytes: int = 0,
) -> Answer:
    """Send ``body`` to ``target`` through one of ``addresses``.

    The answer's body is read up to ``excerpt_bytes``, within the deadline; the rest is
    not read. An excerpt the peer fails to send in time is left empty: the status alone
    decides the outcome.
    """
    connection = _PinnedConnection(
        target,
        addresses,
        tls=tls if target.scheme == "https" else None,
        deadline=deadline,
        clock=clock,
    )
    try:
        connection.request(method, target.path, body=body, headers=headers)
        with connection.getresponse() as response:
            excerpt = b""
            if excerpt_bytes:
                try:
                    excerpt = response.read(excerpt_bytes)
                except (OSError, http.client.HTTPException):
                    excerpt = b""
            return Answer(
                response.status, response.reason, response.getheader("Retry-After"), excerpt
            )
    finally:
        connection.close()


class _DeadlineMixin:
    """Before each blocking read or write, sets the socket's timeout to the time left."""

    deadline: float | None = None  # None: behave like a plain socket
    clock: Callable[[], float] = time.monotonic

    def _arm(self) -> None:
        if self.deadline is not None:
            left = self.deadline - self.clock()
            if left <= 0:
                raise TimeoutError("the attempt's deadline has passed")
            self.settimeout(left)  # type: ignore[attr-defined]

    def recv_into(self, *args: Any, **kwargs: Any) -> int:
        self._arm()
        return super().recv_into(*args, **kwargs)  # type: ignore[misc]

    def send(self, *args: Any, **kwargs: Any) -> int:
        self._arm()
        return super().send(*args, **kwargs)  # type: ignore[misc]

    def sendall(self, *args: Any, **kwargs: Any) -> None:
        self._arm()
        return super().sendall(*args, **kwargs)  # type: ignore[misc]


class _DeadlineSocket(_DeadlineMixin, socket.socket):
    pass


class _DeadlineSSLSocket(_DeadlineMixin, ssl.SSLSocket):
    pass


class _PinnedConnection(http.client.HTTPConnection):
    """An HTTP(S) connection to a host name whose TCP peer is one of the given addresses."""

    def __init__(
        self,
        target: Target,
        addresses: Sequence[str],
        *,
        tls: ssl.SSLContext | None,
        deadline: float,
        clock: Callable[[], float],
    ) -> None:
        super().__init__(target.host, target.port)
        self.default_port = DEFAULT_PORTS[target.scheme]  # Host: omits the default port
        self._addresses = addresses
        self._tls = tls
        self._deadline = deadline
        self._clock = clock

    def connect(self) -> None:
        sock = _connect(self._addresses, self.port, deadline=self._deadline, clock=self._clock)
        if self._tls is not None:
            sock = self._tls.wrap_socket(sock, server_hostname=self.host)
        sock.deadline, sock.clock = self._deadline, self._clock  # type: ignore[attr-defined]
        self.sock = sock


def _connect(
    addresses: Sequence[str], port: int, *, deadline: float, clock: Callable[[], float]
) -> socket.socket:
    """A TCP connection to the first of ``addresses`` that accepts one before the deadline."""
    error: OSError = OSError("no address to connect to")
    for address in addresses:
        left = deadline - clock()
        if left <= 0:
            raise TimeoutError("the attempt's deadline passed while connecting")
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        sock = _DeadlineSocket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(left)  # also bounds the TLS handshake that may follow
            sock.connect((address, port))
        except OSError as exc:
            sock.close()
            error = exc
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    raise error
