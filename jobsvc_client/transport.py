"""Sending one HTTP request: the port the client talks through, and its urllib adapter."""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Protocol

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


class UrllibTransport:
    """The standard library's HTTP client; no redirects are followed for non-GET requests."""

    def send(
        self, method: str, url: str, *, headers: dict[str, str], body: bytes | None, timeout: float
    ) -> Response:
        request = urllib.request.Request(url, data=body, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return Response(answer.status, _lower(answer.headers), answer.read())
        except urllib.error.HTTPError as exc:
            with exc:
                return Response(exc.code, _lower(exc.headers), exc.read())
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TransportError(f"{method} {url}: {reason}") from exc


def _lower(headers) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}
