"""How the OpenAPI schema describes the service's authentication: a Bearer JWT."""

from __future__ import annotations

from drf_spectacular.contrib.rest_framework_simplejwt import SimpleJWTScheme


class CachedUserJWTScheme(SimpleJWTScheme):
    """drf-spectacular matches authenticator classes exactly, so name the subclass."""

    target_class = "jobsvc.accounts.authentication.CachedUserJWTAuthentication"
