"""Sending one HTTP request: the port the client talks through, and its urllib adapter."""

from __future__ import annotations

import ipaddress
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from jobsvc_client.errors import TransportError


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]  # names lower-cased
    body: bytes


class Transport(Protocol):
    def send(
        self, method: str, url: str, *, headers: dict[str, str], body: bytes | None, timeout: float
    ) -> Response:
        """Send one request; an HTTP error status is a Response, an unreachable API raises."""


# Set to 1 to let the client send requests (a password, a token) over plain HTTP to a
# host that is not this machine: on a network you trust, or behind a tunnel.
ALLOW_HTTP_ENV = "JOBSVC_CLIENT_ALLOW_HTTP"


class UrllibTransport:
    """The standard library's HTTP client, refusing what would leak the credentials.

    Redirects are never followed: urllib would resend the request, ``Authorization``
    included, to wherever the answer points (another host, or plain HTTP), and turn a
    POST into a GET; a 3xx is returned as the answer instead. Plain ``http://`` is sent
    only to a loopback address or ``localhost``, unless ``allow_http`` (default: the
    ``JOBSVC_CLIENT_ALLOW_HTTP`` environment variable) says otherwise.
    """

    def __init__(self, *, allow_http: bool | None = None) -> None:
        if allow_http is None:
            allow_http = os.environ.get(ALLOW_HTTP_ENV, "") == "1"
        self._allow_http = allow_http
        self._opener = urllib.request.build_opener(_NoRedirects)

    def send(
        self, method: str, url: str, *, headers: dict[str, str], body: bytes | None, timeout: float
    ) -> Response:
        if not self._allow_http and not secure_enough(url):
            raise TransportError(
                f"{method} {url}: refusing to send credentials over plain HTTP to a host "
                f"that is not this machine; use https, or set {ALLOW_HTTP_ENV}=1"
            )
        request = urllib.request.Request(url, data=body, headers=headers, method=method)
        try:
            with self._opener.open(request, timeout=timeout) as answer:
                return Response(answer.status, _lower(answer.headers), answer.read())
        except urllib.error.HTTPError as exc:
            with exc:
                return Response(exc.code, _lower(exc.headers), exc.read())
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TransportError(f"{method} {url}: {reason}") from exc


def secure_enough(url: str) -> bool:
    """HTTPS anywhere, or plain HTTP to this machine (a loopback address or localhost)."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        return True
    if parts.scheme != "http":
        return False
    host = (parts.hostname or "").rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx is the answer (an HTTPError), never a new request."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def _lower(headers) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}
