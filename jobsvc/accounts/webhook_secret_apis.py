"""HTTP endpoints of the caller's webhook signing secret: read it, rotate it.

Both answer the secret itself, so neither answer may be cached (``Cache-Control:
no-store``). ``jobsvc.accounts.webhook_secrets`` does the work.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from jobsvc.accounts.webhook_secrets import (
    SigningSecret,
    webhook_secret_get,
    webhook_secret_rotate,
)
from jobsvc.api.envelope import ErrorOutput, enveloped, ok

_NOT_STORED = {"Cache-Control": "no-store", "Pragma": "no-cache"}
_ERRORS = {code: OpenApiResponse(ErrorOutput) for code in (401, 503)}
GET_DESCRIPTION = (
    "The secret the http handler signs your jobs' deliveries with (Standard Webhooks: "
    "`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,...`), created on first "
    "use. Give it to your receivers to verify deliveries."
)
ROTATE_DESCRIPTION = (
    "Replace the secret. Deliveries are signed with the new one within seconds, and "
    "with the previous one too until `previous_expires_at` (a second `v1,` signature "
    "in the same header), so receivers can switch without losing deliveries."
)


class WebhookSecretOutput(serializers.Serializer):
    secret = serializers.CharField(help_text="whsec_ and the base64 of 32 random bytes.")
    created_at = serializers.DateTimeField()
    previous_expires_at = serializers.DateTimeField(
        allow_null=True, help_text="Until when the replaced secret signs too; null: none does."
    )


def _to_dict(secret: SigningSecret) -> dict[str, Any]:
    return {
        "secret": secret.secret,
        "created_at": _iso(secret.created_at),
        "previous_expires_at": _iso(secret.previous_expires_at),
    }


def _iso(value) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


class WebhookSecretApi(APIView):
    @extend_schema(
        operation_id="webhook_secret_get",
        description=GET_DESCRIPTION,
        responses={200: enveloped("WebhookSecret", WebhookSecretOutput()), **_ERRORS},
    )
    def get(self, request: Request) -> Response:
        return ok(_to_dict(webhook_secret_get(user_id=request.user.pk)), headers=_NOT_STORED)


class WebhookSecretRotateApi(APIView):
    @extend_schema(
        operation_id="webhook_secret_rotate",
        description=ROTATE_DESCRIPTION,
        request=None,
        responses={200: enveloped("WebhookSecretRotated", WebhookSecretOutput()), **_ERRORS},
    )
    def post(self, request: Request) -> Response:
        rotated = webhook_secret_rotate(user_id=request.user.pk)
        return ok(_to_dict(rotated), headers=_NOT_STORED)
