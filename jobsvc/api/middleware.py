"""Middleware that runs before Django or DRF read the body: the request id, size guards."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

from django.conf import settings
from django.core.signals import request_finished
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse, JsonResponse

from jobsvc import logs
from jobsvc.api.errors import error_body

REQUEST_ID_HEADER = "X-Request-ID"
# A caller's id is kept if it is this sane (it goes into log lines as it is); any other
# value is replaced by a new one.
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:+/=@-]{1,128}")


class RequestIdMiddleware:
    """Give every request an id: the caller's ``X-Request-ID`` if it is sane, else a new one.

    The id is echoed in the response's ``X-Request-ID`` and stamped on every log line
    written while the request is served (``jobsvc.logs.RequestIdFilter``). It is kept
    until the request has finished (Django's ``request_finished``), not only while the
    middleware runs: Django logs a 4xx or 5xx answer after the middleware returned it.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        given = request.headers.get(REQUEST_ID_HEADER, "")
        request_id = given if _SANE_REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        logs.request_id.set(request_id)
        response = self.get_response(request)
        response[REQUEST_ID_HEADER] = request_id
        return response


@receiver(request_finished, dispatch_uid="jobsvc.api.middleware.forget_request_id")
def _forget_request_id(**kwargs: object) -> None:
    logs.request_id.set("")


class RequestSizeLimitMiddleware:
    """Answer 413 to a body larger than ``MAX_REQUEST_BYTES``.

    DRF's parsers read the WSGI stream directly, so Django's DATA_UPLOAD_MAX_MEMORY_SIZE
    does not bound what they read.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.limit = settings.MAX_REQUEST_BYTES

    def __call__(self, request: HttpRequest) -> HttpResponse:
        raw_length = request.META.get("CONTENT_LENGTH") or "0"
        try:
            length = int(raw_length)
        except ValueError:
            return JsonResponse(
                error_body("bad_request", "Content-Length is not a number."), status=400
            )
        if length > self.limit:
            message = f"The request body is {length} bytes; the limit is {self.limit}."
            return JsonResponse(error_body("request_too_large", message), status=413)
        return self.get_response(request)
