"""The admin site's log-in, throttled like the API's (``jobsvc.accounts.throttles``).

Django's admin log-in form is the way into staff accounts, the most valuable ones, so a
posted form counts against the same per-address and per-account buckets as an API
log-in: a guesser gains nothing by switching between the two.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse

from jobsvc import errors
from jobsvc.accounts.throttles import throttle_login
from jobsvc.rate_limits import rate_limit_headers


def throttled_admin_login(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """``admin.site.login``, after a posted form is admitted by the log-in throttles."""
    if request.method == "POST":
        try:
            throttle_login(request, request.POST.get("username", ""))
        except errors.Throttled as exc:
            response = HttpResponse(
                f"Too many log-in attempts. {exc.message}\n",
                status=429,
                content_type="text/plain; charset=utf-8",
            )
            response["Retry-After"] = str(exc.retry_after)
            for name, value in rate_limit_headers(exc.quotas).items():
                response[name] = value
            return response
    return admin.site.login(request, *args, **kwargs)
