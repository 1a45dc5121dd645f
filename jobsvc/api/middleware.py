"""Request guards that run before Django or DRF read the body."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from jobsvc.api.errors import error_body


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
