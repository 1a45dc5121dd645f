"""Request validation and response shapes for users and tokens."""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.contrib.auth import password_validation
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers

from jobsvc.accounts.models import DEFAULT_JOB_WEIGHT, User


class NumberField(serializers.FloatField):
    """A number: DRF's FloatField would read JSON true and false as 1.0 and 0.0."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)


class UserCreateInput(serializers.Serializer):
    username = serializers.CharField(max_length=150, validators=[UnicodeUsernameValidator()])
    password = serializers.CharField(write_only=True, trim_whitespace=False, max_length=4096)
    job_weight = NumberField(required=False, default=DEFAULT_JOB_WEIGHT)

    def validate_job_weight(self, value: float) -> float:
        if not math.isfinite(value) or value <= 0:
            raise serializers.ValidationError("Must be a positive number.")
        if value > settings.MAX_JOB_WEIGHT:
            raise serializers.ValidationError(f"At most {settings.MAX_JOB_WEIGHT:g}.")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        candidate = User(username=attrs["username"], job_weight=attrs["job_weight"])
        try:
            password_validation.validate_password(attrs["password"], user=candidate)
        except DjangoValidationError as exc:
            raise serializers.ValidationError({"password": list(exc.messages)}) from None
        return attrs


class LoginInput(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(trim_whitespace=False, max_length=4096)


def user_to_dict(user: User) -> dict[str, Any]:
    return {"id": user.pk, "username": user.username, "job_weight": user.job_weight}


class UserOutput(serializers.Serializer):
    """Documents the user shape in the OpenAPI schema."""

    id = serializers.IntegerField()
    username = serializers.CharField()
    job_weight = serializers.FloatField()


class TokenOutput(serializers.Serializer):
    expire = serializers.DateTimeField()
    token = serializers.CharField()


class LoginOutput(TokenOutput):
    user = UserOutput()
