"""Free TCP ports on the loopback interface.

Ports are picked below the kernel's ephemeral range, so the client sockets of the stack
itself (database connections, Kafka clients) cannot take a port between the moment it is
picked and the moment its server binds it. Ports handed out once are not handed out again
by this process.
"""

from __future__ import annotations

import errno
import random
import socket
import threading
from pathlib import Path

LOOPBACK = "127.0.0.1"
LOWEST_PORT = 20000  # below this live well-known services (5432, 8000, 9092, ...)
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL_LOW = 32768  # Linux default start of the ephemeral range
ATTEMPTS = 200  # random candidates tried before asking the kernel for any free port

_handed_out: set[int] = set()
_lock = threading.Lock()


def port_is_free(port: int, *, host: str = LOOPBACK) -> bool:
    """True if a server could bind `host:port` now.

    SO_REUSEADDR is set as the servers set it, so connections in TIME_WAIT from an
    earlier run do not make a port look taken.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def free_port(*, host: str = LOOPBACK, preferred: int | None = None) -> int:
    """A port nobody listens on, `preferred` when it is free."""
    with _lock:
        if preferred is not None and preferred not in _handed_out and port_is_free(preferred):
            return _hand_out(preferred)
        high = _ephemeral_low() - 1
        for _ in range(ATTEMPTS):
            candidate = random.randint(LOWEST_PORT, high)
            if candidate not in _handed_out and port_is_free(candidate, host=host):
                return _hand_out(candidate)
        # The range below the ephemeral ports is crowded: fall back to the kernel's choice.
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((host, 0))
                candidate = sock.getsockname()[1]
            if candidate not in _handed_out:
                return _hand_out(candidate)


def _hand_out(port: int) -> int:
    _handed_out.add(port)
    return port


def _ephemeral_low() -> int:
    try:
        low = int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_LOW
    return max(low, LOWEST_PORT + 1000)
