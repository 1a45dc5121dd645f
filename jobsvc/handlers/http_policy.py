"""Where the ``http`` handler may send a request: URL rules, host allow-list, addresses.

The rules themselves are described in ``http``; this module only answers questions
(``parse_url``, ``HostAllowList.allows``, ``non_public_kind``). URL problems raise
``InvalidHandlerParams`` with a message for the API's caller.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from jobsvc.handlers.errors import HandlerConfigError, InvalidHandlerParams

DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_URL_LENGTH = 2048  # characters

_LABEL = r"(?!-)[a-z0-9_-]{1,63}(?<!-)"
_HOST_NAME = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_MAX_HOST_NAME = 253  # characters
# Most specific first: 127.0.0.1 is also "private", but "loopback" says more.
_NON_PUBLIC_KINDS = ("unspecified", "loopback", "link_local", "multicast", "reserved", "private")

Resolver = Callable[[str, int], Sequence[str]]


@dataclass(frozen=True)
class Target:
    """Where a request goes, from a URL that passed ``parse_url``."""

    scheme: str  # "http" or "https"
    host: str  # lower case, no trailing dot; an IPv6 address without brackets
    port: int
    path: str  # what follows the host in the request line: path and query

    @property
    def display(self) -> str:
        """The URL without its query (which may hold a token), for messages."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.path.partition('?')[0]}"


def parse_url(url: Any) -> Target:
    """The target of an acceptable URL; ``InvalidHandlerParams`` saying what is wrong."""
    if not isinstance(url, str) or not url:
        raise InvalidHandlerParams("url is required: the http(s) URL to POST the job to.")
    if len(url) > MAX_URL_LENGTH:
        raise InvalidHandlerParams(f"url is longer than {MAX_URL_LENGTH} characters.")
    if not (url.isascii() and url.isprintable()) or " " in url:
        raise InvalidHandlerParams(
            "url must be printable ASCII without spaces: percent-encode other characters "
            "and write host names in their xn-- (punycode) form."
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidHandlerParams(f"url is malformed: {exc}.") from None
    if parts.scheme not in DEFAULT_PORTS:
        raise InvalidHandlerParams(
            f"url must start with http:// or https://, not {parts.scheme or 'no scheme'}."
        )
    if parts.username is not None or parts.password is not None:
        raise InvalidHandlerParams(
            "url must not contain credentials (user:password@): they would be stored "
            "and shown with the job."
        )
    host = normalise_host(parts.hostname or "")
    if not host:
        raise InvalidHandlerParams("url has no host.")
    if not is_ip(host) and not _is_host_name(host):
        raise InvalidHandlerParams(f"url: {host!r} is not a valid host name.")
    if port == 0:
        raise InvalidHandlerParams("url: port 0 is not a port a server listens on.")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, host, port or DEFAULT_PORTS[parts.scheme], path)


class HostAllowList:
    """Hosts, each with the ports it may be called on.

    An entry is a host and optionally a port: ``hooks.example.com`` (ports 80 and 443
    only, http's and https's own), ``hooks.example.com:8443`` (that port only) or
    ``hooks.example.com:*`` (any port: for test receivers on ports picked at random).
    The host is an exact host name or IP address (an IPv6 address with a port in
    brackets: ``[2001:db8::1]:8443``), or ``*.example.com`` for any name below
    example.com; a pattern never matches the domain itself (list ``example.com``
    separately) nor an IP address. An empty list allows nothing.
    """

    def __init__(self, entries: Iterable[str]) -> None:
        if isinstance(entries, str):
            raise HandlerConfigError("allowed_hosts must be a list of hosts, not one string")
        exact: dict[str, set[int] | None] = {}
        suffixes: list[tuple[str, frozenset[int] | None]] = []
        for raw in entries:
            host, ports = _host_and_ports(str(raw).strip(), raw)
            if host.startswith("*.") and _is_host_name(host[2:]):
                suffixes.append((host[1:], ports))  # ".example.com"
            elif is_ip(host) or _is_host_name(host):
                known = exact.get(host, set())
                exact[host] = None if known is None or ports is None else known | ports
            else:
                raise HandlerConfigError(
                    f"allowed_hosts: {raw!r} is neither a host name, an IP address "
                    "nor a *.domain pattern"
                )
        self._exact = exact
        self._suffixes = tuple(suffixes)

    def allows(self, host: str, port: int) -> bool:
        """Whether ``host`` (as ``normalise_host`` returns it) may be called on ``port``."""
        if host in self._exact:
            ports = self._exact[host]
            if ports is None or port in ports:
                return True
        if is_ip(host):
            return False
        return any(
            host.endswith(suffix) and (ports is None or port in ports)
            for suffix, ports in self._suffixes
        )


_WEB_PORTS = frozenset(DEFAULT_PORTS.values())


def _host_and_ports(entry: str, raw: object) -> tuple[str, frozenset[int] | None]:
    """(normalised host, the ports it allows; None: any) of one allow-list entry."""
    host, colon, port = entry, "", ""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise HandlerConfigError(f"allowed_hosts: {raw!r} is not [address]:port")
        colon, port = rest[:1], rest[1:]
    elif entry.count(":") == 1:
        host, colon, port = entry.partition(":")
    if not colon:
        return normalise_host(host), _WEB_PORTS
    if port == "*":
        return normalise_host(host), None
    if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise HandlerConfigError(f"allowed_hosts: {raw!r} has no valid port after its colon")
    return normalise_host(host), frozenset({int(port)})


def resolve_host(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, in the resolver's order; OSError if none."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def non_public_kind(address: str) -> str | None:
    """What kind of non-public address this is ("loopback", ...); None for a public one."""
    try:
        ip: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(address)
    except ValueError:
        return "malformed"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for kind in _NON_PUBLIC_KINDS:
        if getattr(ip, f"is_{kind}"):
            return kind.replace("_", "-")
    return None if ip.is_global else "non-global"


def normalise_host(host: str) -> str:
    """Lower case, no brackets or trailing dot; an IP address in its canonical form."""
    host = host.lower().removeprefix("[").removesuffix("]").rstrip(".")
    return str(ipaddress.ip_address(host)) if is_ip(host) else host


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _is_host_name(host: str) -> bool:
    return len(host) <= _MAX_HOST_NAME and _HOST_NAME.fullmatch(host) is not None
