"""Readiness probes: does a server answer its own protocol yet?

Each probe returns False (never raises) while the server is not there, so it can be
polled with `polling.poll_until`.
"""

from __future__ import annotations

import http.client
import socket
import struct
import urllib.error
import urllib.request

PROBE_TIMEOUT = 1.0  # seconds for one probe round trip
KAFKA_API_VERSIONS = 18  # Kafka protocol api key of ApiVersions
KAFKA_PROBE_CORRELATION_ID = 0x6A6F6273  # any id; the response must echo it

# No proxy for loopback probes, whatever http_proxy says.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def tcp_accepts(host: str, port: int, *, timeout: float = PROBE_TIMEOUT) -> bool:
    """True if something accepts TCP connections on `host:port`."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def zookeeper_ruok(host: str, port: int, *, timeout: float = PROBE_TIMEOUT) -> bool:
    """True if ZooKeeper answers the `ruok` four-letter word with `imok` (it is serving)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"ruok")
            return _read_to_eof(sock, limit=16) == b"imok"
    except OSError:
        return False


def kafka_api_versions(host: str, port: int, *, timeout: float = PROBE_TIMEOUT) -> bool:
    """True if a Kafka-protocol broker answers an ApiVersions v0 request without error."""
    client_id = b"localstack-probe"
    body = struct.pack(">hhih", KAFKA_API_VERSIONS, 0, KAFKA_PROBE_CORRELATION_ID, len(client_id))
    request = struct.pack(">i", len(body) + len(client_id)) + body + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(request)
            (size,) = struct.unpack(">i", _read_exactly(sock, 4))
            correlation_id, error_code = struct.unpack(">ih", _read_exactly(sock, min(size, 6)))
    except (OSError, struct.error):
        return False
    return correlation_id == KAFKA_PROBE_CORRELATION_ID and error_code == 0


def http_ok(url: str, *, timeout: float = PROBE_TIMEOUT * 2) -> bool:
    """True if `GET url` answers 200."""
    try:
        with _opener.open(url, timeout=timeout) as response:
            return response.status == 200
    except (OSError, http.client.HTTPException, urllib.error.URLError):
        return False


def _read_to_eof(sock: socket.socket, *, limit: int) -> bytes:
    data = b""
    while len(data) < limit:
        chunk = sock.recv(limit - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed mid-response")
        data += chunk
    return data
