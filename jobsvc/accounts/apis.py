"""HTTP endpoints for users and tokens. They translate; services and tokens do the work."""

from __future__ import annotations

from django.contrib.auth import authenticate
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from jobsvc.accounts import serializers as s
from jobsvc.accounts.services import user_create
from jobsvc.accounts.tokens import TokenRejected, token_issue, token_refresh
from jobsvc.api.envelope import ErrorOutput, enveloped, ok
from jobsvc.api.errors import error_body
from jobsvc.jobs.limits import user_usage

_ERRORS = {code: OpenApiResponse(ErrorOutput) for code in (400, 401, 403, 429, 503)}
SIGN_UP_DESCRIPTION = (
    "Create a user. Besides the schema, the password must pass Django's validators: not a "
    "common password and not too like the username. A taken username is 409."
)


class UserCreateApi(APIView):
    """Sign up; a staff caller may create users with any weight even when sign-up is off."""

    permission_classes = [AllowAny]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "signup"

    @extend_schema(
        description=SIGN_UP_DESCRIPTION,
        request=s.UserCreateInput,
        responses={201: enveloped("UserCreated", s.UserOutput()), 409: _ERRORS[400], **_ERRORS},
    )
    def post(self, request: Request) -> Response:
        data = s.UserCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        caller = request.user if request.user is not None else None
        user = user_create(created_by=caller, **data.validated_data)
        return ok(s.user_to_dict(user), status=201)


class LoginApi(APIView):
    """Exchange a username and password for a token."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "login"

    @extend_schema(
        request=s.LoginInput,
        responses={200: enveloped("LoginResult", s.LoginOutput()), **_ERRORS},
    )
    def post(self, request: Request) -> Response:
        data = s.LoginInput(data=request.data)
        data.is_valid(raise_exception=True)
        user = authenticate(request._request, **data.validated_data)
        if user is None:
            return Response(
                error_body("invalid_credentials", "Wrong username or password."), status=401
            )
        issued = token_issue(user=user)
        return ok({"expire": issued.expire, "token": issued.token, "user": s.user_to_dict(user)})


class RefreshApi(APIView):
    """Exchange an unexpired token (``Authorization: Bearer ...``) for a fresh one."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "login"

    @extend_schema(
        request=None, responses={200: enveloped("Refreshed", s.TokenOutput()), **_ERRORS}
    )
    def post(self, request: Request) -> Response:
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


class MeApi(APIView):
    """The caller's account: id, username, weight, limits and usage."""

    @extend_schema(
        operation_id="me_get",
        responses={200: enveloped("Me", s.MeOutput()), **_ERRORS},
    )
    def get(self, request: Request) -> Response:
        return ok(s.me_to_dict(request.user, user_usage(user=request.user)))
