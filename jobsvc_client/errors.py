"""The client's errors, one tree, each raised at the boundary it names::

JobsvcError
├── TransportError        the API could not be reached (connection refused, timeout)
├── ApiError              the API answered an error envelope (status, code, message)
│   ├── AuthError         401: no token, an expired one, or wrong credentials
│   ├── Forbidden         403: e.g. a staff-only operation
│   ├── NotFound          404: no such job (or another user's)
│   ├── Conflict          409: e.g. cancelling a running job
│   ├── Unprocessable     422: an Idempotency-Key reused with another request
│   └── Unavailable       429 or 503 after every retry
├── NotLoggedIn           the client holds no token; log in first
└── WaitTimeout           a job did not finish within the time given to ``wait``
"""

from __future__ import annotations

from typing import Any


class JobsvcError(Exception):
    """Root of every error this package raises."""


class TransportError(JobsvcError):
    """The API could not be reached or did not answer in time."""


class ApiError(JobsvcError):
    """The API answered with an error envelope."""

    def __init__(
        self, status: int, code: str, message: str, fields: dict[str, Any] | None = None
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.fields = fields or {}


class AuthError(ApiError):
    """401: the request carried no valid token, or the credentials were wrong."""


class Forbidden(ApiError):
    """403: the caller may not do this (a staff-only operation, sign-up turned off)."""


class NotFound(ApiError):
    """404: the job does not exist or belongs to another user."""


class Conflict(ApiError):
    """409: the request conflicts with the job's state (or a taken username)."""


class Unprocessable(ApiError):
    """422: the request cannot be applied as sent: an Idempotency-Key first used with
    another request."""


class Unavailable(ApiError):
    """429 or 503 still, after the client's retries."""


class NotLoggedIn(JobsvcError):
    """The client holds no token."""


class WaitTimeout(JobsvcError):
    """A job was still unfinished when the wait ended."""


_ERROR_OF_STATUS: dict[int, type[ApiError]] = {
    401: AuthError,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: Unprocessable,
    429: Unavailable,
    503: Unavailable,
}


def api_error(status: int, body: Any) -> ApiError:
    """The most specific error for an error response (``body`` is its parsed JSON, if any)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {"code": "http_error", "message": f"HTTP {status}"}
    cls = _ERROR_OF_STATUS.get(status, ApiError)
    return cls(
        status,
        str(error.get("code", "http_error")),
        str(error.get("message", "")),
        error.get("fields") if isinstance(error.get("fields"), dict) else None,
    )
