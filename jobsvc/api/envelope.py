"""The response envelope of the seed design: ``{"data": ..., "success": true}``."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import inline_serializer
from rest_framework import serializers
from rest_framework.response import Response


def ok(data: Any, *, status: int = 200, headers: dict[str, str] | None = None, **extra: Any):
    """A success response; ``extra`` adds top-level keys next to ``data`` (e.g. pagination)."""
    return Response({"data": data, "success": True, **extra}, status=status, headers=headers)


def enveloped(name: str, data: serializers.Field, **extra: serializers.Field):
    """The OpenAPI shape of an enveloped response whose ``data`` is ``data``."""
    fields = {"data": data, "success": serializers.BooleanField(default=True), **extra}
    return inline_serializer(name=name, fields=fields)


class ErrorDetail(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    fields = serializers.DictField()


class ErrorOutput(serializers.Serializer):
    """Every error response."""

    success = serializers.BooleanField(default=False)
    error = ErrorDetail()
