"""The ZooKeeper identity of this process (JOBSVC_ZK_SASL_*), for ``coordination``."""

from __future__ import annotations

from django.conf import settings

from coordination.client import SaslAuth


def zookeeper_auth() -> SaslAuth | None:
    """The SASL user the settings name; None when they name none (no authentication)."""
    if not settings.ZK_SASL_USERNAME:
        return None
    return SaslAuth(username=settings.ZK_SASL_USERNAME, password=settings.ZK_SASL_PASSWORD)
