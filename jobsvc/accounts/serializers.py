"""Request validation and response shapes for users and tokens."""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.contrib.auth import password_validation
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from jobsvc.accounts.models import DEFAULT_JOB_WEIGHT, User
from jobsvc.jobs.limits import UserUsage

PASSWORD_MIN_LENGTH = 8  # Django's MinimumLengthValidator default, as settings use it
# CharField refuses NUL characters; stated as a pattern, the schema says so too.
_NO_NUL = RegexValidator(r"^[^\x00]*$", message="Null characters are not allowed.")


class NumberField(serializers.FloatField):
    """A number: DRF's FloatField would read JSON true and false as 1.0 and 0.0."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)


class StringField(serializers.CharField):
    """A JSON string: DRF's CharField would read the number 42 as "42"."""

    default_error_messages = {"invalid": "Must be a string."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


@extend_schema_field(
    {
        "type": "number",
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": settings.MAX_JOB_WEIGHT,
        "description": "Above JOBSVC_SELF_SERVICE_MAX_JOB_WEIGHT needs a staff caller (403).",
    }
)
class JobWeightField(NumberField):
    pass


class UserCreateInput(serializers.Serializer):
    username = StringField(max_length=150, validators=[UnicodeUsernameValidator()])
    # The schema states the length and the not-all-digits rule; the rest of Django's
    # validators (common passwords, likeness to the username) are in the description.
    password = StringField(
        write_only=True,
        trim_whitespace=False,
        min_length=PASSWORD_MIN_LENGTH,
        max_length=4096,
        # Not all digits (Django's NumericPasswordValidator); no NUL, which CharField refuses.
        validators=[
            RegexValidator(
                r"^[^\x00]*[^\x00\d][^\x00]*$",
                message="This password is entirely numeric or contains NUL characters.",
            )
        ],
    )
    job_weight = JobWeightField(required=False, default=DEFAULT_JOB_WEIGHT)

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
    username = StringField(min_length=1, max_length=150, validators=[_NO_NUL])
    password = StringField(
        trim_whitespace=False, min_length=1, max_length=4096, validators=[_NO_NUL]
    )


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


def me_to_dict(user: User, usage: UserUsage) -> dict[str, Any]:
    """The caller's account: who they are, their limits (null: none) and their usage."""
    limits = usage.limits
    return {
        **user_to_dict(user),
        "is_staff": user.is_staff,
        "limits": {
            "max_unfinished_jobs": limits.max_unfinished or None,
            "create_rate_per_second": limits.create_rate or None,
            "create_burst_jobs": usage.create_burst or None,
        },
        "usage": {
            "unfinished_jobs": usage.unfinished,
            "unfinished_jobs_exact": usage.unfinished_exact,
        },
    }


class LimitsOutput(serializers.Serializer):
    max_unfinished_jobs = serializers.IntegerField(
        allow_null=True,
        help_text="Scheduled, queued and running jobs you may have at once; null: no limit.",
    )
    create_rate_per_second = serializers.FloatField(
        allow_null=True,
        help_text="Jobs you may create per second, in each API process; null: no limit.",
    )
    create_burst_jobs = serializers.IntegerField(
        allow_null=True,
        help_text="Jobs you may create at once at that rate (the bucket's size); null: no "
        "rate limit.",
    )


class UsageOutput(serializers.Serializer):
    unfinished_jobs = serializers.IntegerField(
        help_text="Your scheduled, queued and running jobs, as the API process that answered "
        "counted them (it reuses a count for a few seconds and adds what it created since)."
    )
    unfinished_jobs_exact = serializers.BooleanField(
        help_text="False when counting stopped: at your limit, or at 100,000 per shard without one."
    )


class MeOutput(UserOutput):
    is_staff = serializers.BooleanField()
    limits = LimitsOutput()
    usage = UsageOutput()
