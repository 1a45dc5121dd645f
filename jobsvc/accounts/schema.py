"""How the OpenAPI schema describes the service's authentication (a Bearer JWT), and the
rules of the account endpoints' bodies that serializers cannot state."""

from __future__ import annotations

from drf_spectacular.contrib.rest_framework_simplejwt import SimpleJWTScheme


class CachedUserJWTScheme(SimpleJWTScheme):
    """drf-spectacular matches authenticator classes exactly, so name the subclass."""

    target_class = "jobsvc.accounts.authentication.CachedUserJWTAuthentication"


# These bodies refuse fields they do not declare (jobsvc.api.known_fields).
COMPONENT_RULES: dict[str, dict] = {
    name: {"additionalProperties": False}
    for name in ("UserCreateInput", "LoginInput", "PasswordChangeInput")
}
