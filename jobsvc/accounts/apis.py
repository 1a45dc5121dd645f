"""HTTP endpoints for users and tokens. They translate; services and tokens do the work."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from jobsvc.accounts import serializers as s
from jobsvc.accounts.services import user_create, user_password_change
from jobsvc.accounts.throttles import (
    LOGIN_BY_ADDRESS,
    SIGNUP_BY_ADDRESS,
    client_address,
    quotas_of,
    throttle,
    throttle_login,
)
from jobsvc.accounts.tokens import TokenRejected, token_issue, token_refresh, token_revoke
from jobsvc.api.envelope import ErrorOutput, enveloped, ok
from jobsvc.api.errors import error_body
from jobsvc.jobs.limits import user_usage
from jobsvc.rate_limits import rate_limit_headers

_ERRORS = {code: OpenApiResponse(ErrorOutput) for code in (400, 401, 403, 503)}
_THROTTLED = {
    429: OpenApiResponse(
        ErrorOutput,
        description="Too many attempts from this address or for this account; Retry-After "
        "and the RateLimit and RateLimit-Policy fields say when to try again.",
    )
}
SIGN_UP_DESCRIPTION = (
    "Create a user. Besides the schema, the password must pass Django's validators: not a "
    "common password and not too like the username. The username is stored in Unicode "
    "NFKC form, and names are compared without regard to case or compatibility forms: "
    "once `sam` exists, `Sam` and a fullwidth `\uff53am` are taken too (409). Throttled "
    "per client address (JOBSVC_SIGNUP_THROTTLE_RATE)."
)
LOGIN_DESCRIPTION = (
    "Exchange a username (in any case or compatibility form) and password for a token. "
    "Throttled per client address (JOBSVC_LOGIN_THROTTLE_RATE) and per account "
    "(JOBSVC_LOGIN_ACCOUNT_THROTTLE_RATE); every failed attempt is logged and counted."
)


class RateLimited:
    """An endpoint whose answers carry the state of the throttles the request was counted
    against (RateLimit, RateLimit-Policy); those with a token are not to be stored."""

    no_store = False

    def finalize_response(self, request: Request, response: Response, *args: Any, **kwargs: Any):
        response = super().finalize_response(request, response, *args, **kwargs)
        for name, value in rate_limit_headers(quotas_of(request)).items():
            response.setdefault(name, value)
        if self.no_store:
            # RFC 6749 5.1: a response carrying a token must not be cached anywhere.
            response["Cache-Control"] = "no-store"
            response["Pragma"] = "no-cache"
        return response


class UserCreateApi(RateLimited, APIView):
    """Sign up; a staff caller may create users with any weight even when sign-up is off."""

    permission_classes = [AllowAny]

    @extend_schema(
        description=SIGN_UP_DESCRIPTION,
        request=s.UserCreateInput,
        responses={
            201: enveloped("UserCreated", s.UserOutput()),
            409: _ERRORS[400],
            **_ERRORS,
            **_THROTTLED,
        },
    )
    def post(self, request: Request) -> Response:
        throttle(request, SIGNUP_BY_ADDRESS, client_address(request))
        data = s.UserCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        caller = request.user if request.user is not None else None
        user = user_create(created_by=caller, **data.validated_data)
        return ok(s.user_to_dict(user), status=201)


class LoginApi(RateLimited, APIView):
    """Exchange a username and password for a token."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    no_store = True

    @extend_schema(
        description=LOGIN_DESCRIPTION,
        request=s.LoginInput,
        responses={200: enveloped("LoginResult", s.LoginOutput()), **_ERRORS, **_THROTTLED},
    )
    def post(self, request: Request) -> Response:
        data = s.LoginInput(data=request.data)
        data.is_valid(raise_exception=True)
        throttle_login(request, data.validated_data["username"])
        user = authenticate(request._request, **data.validated_data)
        if user is None:
            return Response(
                error_body("invalid_credentials", "Wrong username or password."), status=401
            )
        issued = token_issue(user=user)
        return ok({"expire": issued.expire, "token": issued.token, "user": s.user_to_dict(user)})


class RefreshApi(RateLimited, APIView):
    """Exchange an unexpired token (``Authorization: Bearer ...``) for a fresh one."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    no_store = True

    @extend_schema(
        description="Exchange an unexpired token for a new one; the token sent is revoked "
        "(each token can be refreshed once). A refreshed token never outlives the refresh "
        "window of the log-in it came from. Throttled with log-ins per client address.",
        request=None,
        responses={200: enveloped("Refreshed", s.TokenOutput()), **_ERRORS, **_THROTTLED},
    )
    def post(self, request: Request) -> Response:
        throttle(request, LOGIN_BY_ADDRESS, client_address(request))
        header = request.META.get("HTTP_AUTHORIZATION", "")
        scheme, _, raw_token = header.partition(" ")
        if scheme != "Bearer" or not raw_token.strip():
            return Response(
                error_body("not_authenticated", "Send the token as 'Authorization: Bearer TOKEN'."),
                status=401,
            )
        try:
            issued = token_refresh(raw_token=raw_token.strip())
        except TokenRejected as exc:
            return Response(error_body("token_not_valid", str(exc)), status=401)
        return ok({"expire": issued.expire, "token": issued.token})


class LogoutApi(APIView):
    """Revoke the token this request carries."""

    @extend_schema(
        operation_id="auth_logout",
        description="Revoke the token sent with this request: it stops working at once on "
        "the API process that answers, and on every other within "
        "JOBSVC_AUTH_USER_CACHE_SECONDS. Other tokens of the user are unaffected.",
        request=None,
        responses={204: OpenApiResponse(description="Logged out."), **_ERRORS},
    )
    def post(self, request: Request) -> Response:
        token_revoke(token=request.auth, user_id=request.user.pk)
        return Response(status=204)


class PasswordChangeApi(RateLimited, APIView):
    """Change the caller's password; every token issued before stops working."""

    @extend_schema(
        operation_id="me_password_change",
        description="Change the caller's password. current_password must be right (400 "
        "otherwise, counted as a failed log-in and throttled with the account's log-ins); "
        "new_password must pass the same validators as at sign-up. Every token of the "
        "user issued before, the one sent included, stops working (on every API process "
        "within JOBSVC_AUTH_USER_CACHE_SECONDS): log in again with the new password.",
        request=s.PasswordChangeInput,
        responses={
            204: OpenApiResponse(description="Changed; log in again."),
            **_ERRORS,
            **_THROTTLED,
        },
    )
    def post(self, request: Request) -> Response:
        data = s.PasswordChangeInput(data=request.data)
        data.is_valid(raise_exception=True)
        throttle_login(request, request.user.username)
        user_password_change(
            user_id=request.user.pk, request=request._request, **data.validated_data
        )
        return Response(status=204)


class MeApi(APIView):
    """The caller's account: id, username, weight, limits and usage."""

    @extend_schema(
        operation_id="me_get",
        responses={200: enveloped("Me", s.MeOutput()), **_ERRORS},
    )
    def get(self, request: Request) -> Response:
        return ok(s.me_to_dict(request.user, user_usage(user=request.user)))
