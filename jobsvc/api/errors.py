"""One place where every error becomes an HTTP response in the service's envelope::

{"success": false, "error": {"code": "...", "message": "...", "fields": {...}}}
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404, HttpRequest, JsonResponse
from rest_framework import exceptions as drf
from rest_framework.response import Response

from jobsvc import errors
from jobsvc.rate_limits import rate_limit_headers

logger = logging.getLogger(__name__)

_STATUS_OF_SERVICE_ERROR: tuple[tuple[type[errors.ServiceError], int], ...] = (
    (errors.NotFound, 404),
    (errors.Conflict, 409),
    (errors.Unprocessable, 422),
    (errors.Forbidden, 403),
    (errors.InvalidInput, 400),
    (errors.TooManyRequests, 429),
)

DATABASE_RETRY_AFTER_SECONDS = 1  # what a 503 for an unreachable database tells clients

_MESSAGE_OF_DRF_CODE = {
    "not_authenticated": "Authentication credentials were not provided.",
    "parse_error": "The request body is not valid JSON.",
}


def error_body(code: str, message: str, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"success": False, "error": {"code": code, "message": message, "fields": fields or {}}}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's EXCEPTION_HANDLER: service errors, DRF errors and Django's 404/403."""
    if isinstance(exc, errors.ServiceError):
        headers = {}
        if isinstance(exc, errors.TooManyRequests):
            headers["Retry-After"] = str(exc.retry_after)
            headers.update(rate_limit_headers(exc.quotas))
        return Response(
            error_body(exc.code, exc.message, exc.fields), status=_status_of(exc), headers=headers
        )
    if _is_database_unavailable(exc):
        return _database_unavailable(exc, context)
    if isinstance(exc, Http404):
        exc = drf.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = drf.PermissionDenied()
    if not isinstance(exc, drf.APIException):
        return None  # a bug: Django logs it and answers 500 (see handler500)
    headers = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
    if getattr(exc, "wait", None):
        headers["Retry-After"] = str(int(exc.wait))
    if isinstance(exc, drf.ValidationError):
        body = error_body("invalid", _summary(exc.detail), _fields(exc.detail))
    else:
        code = exc.get_codes() if isinstance(exc.get_codes(), str) else exc.default_code
        detail = exc.detail
        if isinstance(detail, dict) and "detail" in detail:
            detail = detail["detail"]  # simplejwt's InvalidToken: {"detail", "code", "messages"}
        message = _MESSAGE_OF_DRF_CODE.get(code, str(detail))
        body = error_body(code, message)
    return Response(body, status=exc.status_code, headers=headers)


# SQLSTATE classes and codes that say the database, not the request, is at fault: a
# connection lost, a server out of disk or memory or shutting down, a statement cancelled
# (timeout), a transaction ended for idling, a serialization conflict. Some are raised by
# psycopg itself rather than through Django's wrappers (a COPY), so both are looked at.
_UNAVAILABLE_CLASSES = ("08", "53", "57", "58")
_UNAVAILABLE_STATES = frozenset({"25P03", "40001", "40P01", "55P03"})


def _is_database_unavailable(exc: Exception) -> bool:
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    if not isinstance(exc, DatabaseError | psycopg.Error):
        return False
    state = getattr(exc, "sqlstate", None) or getattr(exc.__cause__, "sqlstate", None)
    return bool(state) and (state[:2] in _UNAVAILABLE_CLASSES or state in _UNAVAILABLE_STATES)


def _database_unavailable(exc: Exception, context: dict[str, Any]) -> Response:
    """A database that cannot be reached (down, restarting, connection lost) is a 503.

    The request may or may not have taken effect (a connection lost during a commit), so
    the message points at the Idempotency-Key, which makes a retried create safe.
    """
    view = type(context.get("view")).__name__
    # No traceback: an outage answers every request so, and the error names the cause.
    logger.warning("database unavailable in %s: %s: %s", view, type(exc).__name__, exc)
    message = (
        "A database is unavailable; retry shortly. A create retried with the same "
        "Idempotency-Key is never applied twice."
    )
    return Response(
        error_body("database_unavailable", message),
        status=503,
        headers={"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)},
    )


def _status_of(exc: errors.ServiceError) -> int:
    for error_class, status in _STATUS_OF_SERVICE_ERROR:
        if isinstance(exc, error_class):
            return status
    return 400


def _fields(detail: Any) -> dict[str, Any]:
    if isinstance(detail, dict):
        return {str(key): _plain(value) for key, value in detail.items()}
    if isinstance(detail, list) and detail and all(isinstance(item, dict) for item in detail):
        # A bulk request: report each job's errors under its index in the list.
        return {str(index): _plain(item) for index, item in enumerate(detail) if item}
    return {}


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return str(value)


def _summary(detail: Any) -> str:
    """A one-line message: the first problem found, prefixed with where it is."""
    path: list[str] = []
    while True:
        if isinstance(detail, dict) and detail:
            key, detail = next(iter(detail.items()))
            if key != "non_field_errors":
                path.append(str(key))
        elif isinstance(detail, list) and detail:
            non_empty = [(index, item) for index, item in enumerate(detail) if item]
            if not non_empty:
                break
            index, item = non_empty[0]
            if isinstance(item, dict | list):
                if isinstance(item, dict):
                    path.append(f"[{index}]")
                detail = item
            else:
                detail = item
        else:
            break
    where = ".".join(path).replace(".[", "[")
    return f"{where}: {detail}" if where else str(detail)


def json_404(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(error_body("not_found", "No such endpoint."), status=404)


def json_500(request: HttpRequest) -> JsonResponse:
    return JsonResponse(error_body("server_error", "Internal server error."), status=500)


def json_400(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(error_body("bad_request", "Bad request."), status=400)
