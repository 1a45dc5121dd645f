"""Every failed log-in is logged and counted, wherever it was tried.

Django's ``authenticate()`` sends ``user_login_failed`` when no backend accepts the
credentials (an unknown name, a wrong password, an inactive user): for the API's log-in,
the admin's, and the current password of a password change. The log line names the
username as typed and the client address, never the password (Django has already
replaced it in the signal's credentials); ``jobsvc_logins_failed_total`` counts them, and
the ``LoginFailuresHigh`` alert watches its rate.
"""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.auth.signals import user_login_failed
from django.dispatch import receiver

from jobsvc.accounts.throttles import client_address
from jobsvc.admin_middleware import is_admin_request
from jobsvc.metrics import LOGINS_FAILED

logger = logging.getLogger(__name__)

_MAX_LOGGED_NAME = 150  # characters of the username as typed


@receiver(user_login_failed, dispatch_uid="jobsvc.accounts.login_failures")
def login_failed(sender: Any, credentials: dict[str, Any], request: Any = None, **_: Any) -> None:
    via = "admin" if request is not None and is_admin_request(request) else "api"
    LOGINS_FAILED.labels(via).inc()
    username = str(credentials.get("username", ""))[:_MAX_LOGGED_NAME]
    address = client_address(request) if request is not None else "-"
    logger.warning(
        "failed log-in for %r from %s via %s",
        username,
        address,
        via,
        extra={"action": "login_failed", "via": via, "client": address},
    )
