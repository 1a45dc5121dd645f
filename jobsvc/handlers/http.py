"""The ``http`` handler: POST the job, signed with its owner's secret, to the URL it names.

Parameters: ``{"url": "https://hooks.example.com/jobs"}``, and optionally
``"method"`` (``POST``, the default, ``PUT`` or ``PATCH``) and ``"headers"`` (up to
MAX_HEADERS custom headers, ``{"Authorization": "Bearer ..."}``; names are HTTP tokens,
values printable ASCII without line breaks). The headers the handler sets itself, the
hop-by-hop ones, any ``webhook-*`` and any ``X-Jobsvc-*`` are refused (RESERVED_HEADERS).
Neither the method nor custom headers are covered by the signature, which signs the body.
Header values are write-only: stored with the job to be sent, never shown again
(``redaction``).

The request: ``<method> <url>`` with a compact UTF-8 JSON body
``{"job_id", "user_id", "attempt", "message", "params"}`` (``params`` without header
values), and the headers ``Idempotency-Key: <job_id>`` (the same for every attempt of the
job, so the receiver can drop the duplicates an executor crash, a lost answer or a timeout
after the receiver acted may cause; ``attempt`` in the body says which attempt it is) and
the Standard Webhooks headers ``webhook-id``, ``webhook-timestamp`` and
``webhook-signature``, signed with the job owner's secret(s) (see ``signing``). The
handler asks ``signing_secrets(user_id)`` for them on every request; the caller caches.

The outcome, by answer:

- 2xx: success;
- 429, 5xx, connection errors: ``RetryableError`` (``Retry-After`` in seconds is passed
  on as ``retry_after``); no answer in time: ``HandlerTimeout``;
- 3xx: ``PermanentError``. Redirects are not followed: their target was never checked
  against the allow-list and the address rules below;
- anything else (other 4xx): ``PermanentError``.

The error of an answer that is not 2xx carries its status and an excerpt of its body (at
most MAX_BODY_EXCERPT_BYTES, decoded as UTF-8 with control characters removed), so the
job's ``last_error`` and ``attempt_errors`` say why the receiver refused. Every answer's
status and the first ``response_excerpt_bytes`` of its body (decoded as UTF-8, control
characters but line breaks and tabs removed) are reported as the attempt's
``HandlerResult``, returned on success and carried by the error otherwise, for the
attempt's history. Neither excerpt is kept where private addresses are allowed, where it
would let a job's owner read internal servers.

Where a request may go. URLs come from users, and the executor runs inside the network,
so a URL must pass these checks when the job is created (``validate_params``) and again
before every request (an allow-list may have shrunk, a DNS record changed since):

1. scheme ``http`` or ``https``; printable ASCII; no ``user:password@``;
2. the host and port are in ``allowed_hosts``: an exact host name or IP address, or
   ``*.example.com`` for any name below example.com (not example.com itself); on ports
   80 and 443 only, unless the entry names its port (``host:8443``, or ``host:*`` for
   any). An empty list refuses every URL;
3. unless ``allow_private_addresses``, *every* address the host resolves to is public:
   not loopback, private, link-local, multicast, reserved, unspecified or otherwise
   non-global (an IPv4-mapped IPv6 address is judged by its IPv4 address). A host that
   does not resolve is refused at create time, since nothing can be said about it.

At call time a URL that now fails 1-3 is a ``PermanentError`` (``InvalidHandlerParams``)
and no request is made; a name lookup that fails is retryable.

DNS rebinding: a name that resolved to a public address for the check could resolve to
an internal one a moment later, when the connection is made. So the handler resolves
once per request, checks those addresses and opens the TCP connection to a checked
address itself; the ``Host`` header, TLS SNI and certificate check still use the name
(``http_transport``; standard library only). ``http_policy`` holds the checks.

Time: a request ends by ``min(job.deadline, start + max_timeout)``, a hard limit even
against a server that trickles bytes (see ``http_transport``). Name resolution
(``getaddrinfo``) cannot be interrupted and is bounded by the system resolver's timeout.

The handler holds no per-request state: one instance serves every executor thread.
"""

from __future__ import annotations

import codecs
import http.client
import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from jobsvc.handlers import http_transport, signing
from jobsvc.handlers.base import HandlerResult, JobContext
from jobsvc.handlers.errors import (
    HandlerConfigError,
    HandlerTimeout,
    InvalidHandlerParams,
    PermanentError,
    RetryableError,
)
from jobsvc.handlers.http_policy import (
    HostAllowList,
    Resolver,
    Target,
    is_ip,
    non_public_kind,
    parse_url,
    resolve_host,
)
from jobsvc.handlers.redaction import public_params

DEFAULT_MAX_TIMEOUT = 30.0  # seconds one request may take, whatever the job's timeout
METHODS = ("POST", "PUT", "PATCH")
MAX_HEADERS = 20  # custom headers per job
MAX_HEADER_VALUE_LENGTH = 2048  # characters
MAX_BODY_EXCERPT_BYTES = 512  # of a failed answer's body, kept in the attempt's error
DEFAULT_RESPONSE_EXCERPT_BYTES = 1024  # of every answer's body, reported for its history
# Set by the handler (the body, its signature, the attempt's key), owned by HTTP's
# framing, or hop-by-hop (RFC 9110 7.6.1): a job may not set these.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "content-encoding",
        "transfer-encoding",
        "user-agent",
        "idempotency-key",
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "upgrade",
        "expect",
    }
)
_RESERVED_PREFIXES = ("x-jobsvc-", "webhook-")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")
_HEADER_VALUE = re.compile(r"[\x20-\x7e\t]*")

_USER_AGENT = "jobsvc-executor/1"

# The owner's signing secrets, the newest first (``whsec_...``); raises if none can be had.
SigningSecrets = Callable[[int], Sequence[str]]


class HttpHandler:
    name: ClassVar[str] = "http"

    def __init__(
        self,
        *,
        signing_secrets: SigningSecrets,
        allowed_hosts: Sequence[str],
        allow_private_addresses: bool = False,
        max_timeout: float = DEFAULT_MAX_TIMEOUT,
        response_excerpt_bytes: int = DEFAULT_RESPONSE_EXCERPT_BYTES,
        ca_file: str | None = None,  # PEM bundle to trust instead of the system's CAs
        # Keep an excerpt of a refusing answer's body in the job's error; None: unless
        # private addresses are allowed (internal servers' answers stay unread).
        answer_excerpts: bool | None = None,
        resolver: Resolver = resolve_host,  # injectable for testing
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._signing_secrets = signing_secrets
        if not max_timeout > 0:
            raise HandlerConfigError(f"max_timeout must be > 0 seconds, got {max_timeout}")
        if not isinstance(response_excerpt_bytes, int) or response_excerpt_bytes < 0:
            raise HandlerConfigError(
                f"response_excerpt_bytes must be a whole number >= 0, got {response_excerpt_bytes}"
            )
        self._excerpt_bytes = response_excerpt_bytes
        self._allowed_hosts = HostAllowList(allowed_hosts)
        self._allow_private = allow_private_addresses
        self._answer_excerpts = (
            not allow_private_addresses if answer_excerpts is None else answer_excerpts
        )
        self._max_timeout = max_timeout
        self._resolver = resolver
        self._clock = clock
        self._wall_clock = wall_clock
        try:
            self._tls = http_transport.tls_context(ca_file=ca_file)
        except OSError as exc:  # ssl.SSLError is an OSError
            raise HandlerConfigError(f"cannot load the CA bundle {ca_file}: {exc}") from exc

    def validate_params(self, params: Any) -> dict[str, Any]:
        target = self._target(params)
        if not self._allow_private:
            try:
                addresses = self._resolve(target)
            except OSError as exc:
                raise InvalidHandlerParams(
                    f"url: the host {target.host} could not be resolved ({_reason(exc)})."
                ) from None
            self._check_public(target, addresses)
        stored = {"url": params["url"]}
        if "method" in params:
            stored["method"] = _method(params["method"])
        if "headers" in params:
            stored["headers"] = _custom_headers(params["headers"])
        return stored

    def handle(self, job: JobContext) -> HandlerResult:
        target = self._target(job.params)
        deadline = min(job.deadline, self._clock() + self._max_timeout)
        try:
            addresses = self._resolve(target)
        except OSError as exc:
            raise RetryableError(
                f"{target.display}: name resolution failed: {_reason(exc)}"
            ) from exc
        if not self._allow_private:
            self._check_public(target, addresses)
        # Checked again, like the url: the rules hold for every request made.
        method = _method(job.params.get("method", "POST"))
        custom_headers = _custom_headers(job.params.get("headers", {}))
        body = json.dumps(
            {
                "job_id": job.job_id,
                "user_id": job.user_id,
                "attempt": job.attempt,
                "message": job.message,
                "params": public_params(job.params),
            },
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode()
        try:
            answer = http_transport.post(
                target,
                addresses,
                body=body,
                headers={**custom_headers, **self._headers(job, body)},
                deadline=deadline,
                tls=self._tls,
                clock=self._clock,
                method=method,
                excerpt_bytes=max(MAX_BODY_EXCERPT_BYTES, self._excerpt_bytes),
            )
        except TimeoutError as exc:
            raise HandlerTimeout(f"{target.display}: no answer in time") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise RetryableError(f"{target.display}: {_reason(exc)}") from exc
        # Where private addresses are allowed (tests, development), what an internal
        # server answered is not handed to the job's owner.
        excerpt = answer.body_excerpt[: self._excerpt_bytes] if self._answer_excerpts else b""
        result = HandlerResult(http_status=answer.status, response_excerpt=_text(excerpt) or None)
        _judge(target, answer, result, excerpt=self._answer_excerpts)
        return result

    def _headers(self, job: JobContext, body: bytes) -> dict[str, str]:
        signed = signing.headers(
            signing_secrets=self._signing_secrets(job.user_id),
            msg_id=signing.message_id(job_id=job.job_id, attempt=job.attempt),
            timestamp=int(self._wall_clock()),
            body=body,
        )
        return {
            "Content-Type": "application/json; charset=utf-8",
            "User-Agent": _USER_AGENT,
            "Idempotency-Key": job.idempotency_key,
            **signed,
            "Connection": "close",
        }

    def _target(self, params: Any) -> Target:
        if not isinstance(params, dict):
            raise InvalidHandlerParams("Must be a JSON object with a url.")
        extra = sorted(map(str, set(params) - {"url", "method", "headers"}))
        if extra:
            raise InvalidHandlerParams(
                f"Unknown parameter(s): {', '.join(extra)}; the http handler takes url, "
                "method and headers."
            )
        target = parse_url(params.get("url"))
        if not self._allowed_hosts.allows(target.host, target.port):
            raise InvalidHandlerParams(
                f"url: the host {target.host} on port {target.port} is not in the http "
                "handler's allow-list."
            )
        return target

    def _resolve(self, target: Target) -> list[str]:
        if is_ip(target.host):
            return [target.host]
        addresses = list(self._resolver(target.host, target.port))
        if not addresses:
            raise OSError("no addresses")
        return addresses

    def _check_public(self, target: Target, addresses: Sequence[str]) -> None:
        for address in addresses:
            kind = non_public_kind(address)
            if kind is not None:
                # The address itself is not said: the error would tell a user what an
                # internal name resolves to.
                raise InvalidHandlerParams(
                    f"url: the host {target.host} resolves to a {kind} address; "
                    "only public addresses are allowed."
                )


def _method(value: Any) -> str:
    if not isinstance(value, str) or value.upper() not in METHODS:
        raise InvalidHandlerParams(f"method must be one of {', '.join(METHODS)}.")
    return value.upper()


def _custom_headers(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise InvalidHandlerParams('headers must be a JSON object: {"Name": "value", ...}.')
    if len(value) > MAX_HEADERS:
        raise InvalidHandlerParams(f"headers: at most {MAX_HEADERS}, got {len(value)}.")
    for name, header in value.items():
        if not _HEADER_NAME.fullmatch(name):
            raise InvalidHandlerParams(f"headers: {name!r} is not a valid header name.")
        lowered = name.lower()
        if lowered in RESERVED_HEADERS or lowered.startswith(_RESERVED_PREFIXES):
            raise InvalidHandlerParams(
                f"headers: {name} is set by the http handler or by HTTP itself; it cannot be given."
            )
        if (
            not isinstance(header, str)
            or len(header) > MAX_HEADER_VALUE_LENGTH
            or not _HEADER_VALUE.fullmatch(header)
        ):
            raise InvalidHandlerParams(
                f"headers: the value of {name} must be printable ASCII without line breaks, "
                f"at most {MAX_HEADER_VALUE_LENGTH} characters."
            )
    return dict(value)


def _judge(
    target: Target, answer: http_transport.Answer, result: HandlerResult, *, excerpt: bool
) -> None:
    if 200 <= answer.status < 300:
        return
    message = f"{target.display} answered {answer.status} {answer.reason}".rstrip()
    excerpt = _printable(answer.body_excerpt[:MAX_BODY_EXCERPT_BYTES]) if excerpt else ""
    if excerpt:
        message = f"{message}: {excerpt}"
    if answer.status == 429 or 500 <= answer.status < 600:
        raise RetryableError(message, retry_after=_seconds(answer.retry_after), result=result)
    if 300 <= answer.status < 400:
        raise PermanentError(f"{message}; redirects are not followed", result=result)
    raise PermanentError(message, result=result)


def _text(excerpt: bytes) -> str:
    """A body excerpt as text for the attempt's history: undecodable bytes replaced, a
    character the read cut in half at the end left out, control characters but line
    breaks and tabs dropped."""
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(excerpt, final=False)
    return "".join(char for char in text if char.isprintable() or char in "\n\t")


def _printable(excerpt: bytes) -> str:
    """A body excerpt fit for an error message: text, one line, no control characters."""
    text = excerpt.decode("utf-8", errors="replace")
    text = "".join(char if char.isprintable() else " " for char in text)
    text = " ".join(text.split())
    return f"{text}…" if text and len(excerpt) >= MAX_BODY_EXCERPT_BYTES else text


def _seconds(retry_after: str | None) -> float | None:
    """A ``Retry-After`` in delta-seconds; the HTTP-date form is ignored."""
    value = (retry_after or "").strip()
    return float(value) if value.isascii() and value.isdigit() else None


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
