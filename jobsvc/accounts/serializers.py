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
from jobsvc.accounts.weights import job_weight_problem
from jobsvc.api.known_fields import KnownFieldsOnly
from jobsvc.jobs.limits import UserUsage

USERNAME_MAX_LENGTH = 150  # User.username's column
PASSWORD_MIN_LENGTH = 8  # Django's MinimumLengthValidator default, as settings use it
# CharField refuses NUL characters; stated as a pattern, the schema says so too.
_NO_NUL = RegexValidator(r"^[^\x00]*$", message="Null characters are not allowed.")


class NumberField(serializers.FloatField):
    """A JSON number and only that: DRF's FloatField would read true as 1.0 and "nan" as
    NaN. An integer too large for a float is read as infinity, for the bounds to refuse."""

    default_error_messages = {"invalid": "Must be a number."}

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        try:
            return float(data)
        except OverflowError:
            return math.inf


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
        "minimum": settings.MIN_JOB_WEIGHT,
        "maximum": settings.MAX_JOB_WEIGHT,
        "description": "Share of dispatch capacity relative to other users, from "
        "JOBSVC_MIN_JOB_WEIGHT to JOBSVC_MAX_JOB_WEIGHT. Above "
        "JOBSVC_SELF_SERVICE_MAX_JOB_WEIGHT needs a staff caller (403).",
    }
)
class JobWeightField(NumberField):
    """A weight within the deployment's bounds (``jobsvc.accounts.weights``)."""

    def to_internal_value(self, data: Any) -> float:
        value = super().to_internal_value(data)
        problem = job_weight_problem(
            value, minimum=settings.MIN_JOB_WEIGHT, maximum=settings.MAX_JOB_WEIGHT
        )
        if problem is not None:
            raise serializers.ValidationError(problem)
        return value


def _password(**kwargs: Any) -> StringField:
    """A password as sign-up takes it; Django's validators run with the user, in the service."""
    return StringField(
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
        **kwargs,
    )


class UserCreateInput(KnownFieldsOnly):
    username = StringField(max_length=USERNAME_MAX_LENGTH, validators=[UnicodeUsernameValidator()])
    # The schema states the length and the not-all-digits rule; the rest of Django's
    # validators (common passwords, likeness to the username) are in the description.
    password = _password()
    job_weight = JobWeightField(required=False, default=DEFAULT_JOB_WEIGHT)

    def validate_username(self, value: str) -> str:
        """The name as it is stored, in NFKC form, which must pass the same rules."""
        normalized = User.normalize_username(value)
        if len(normalized) > USERNAME_MAX_LENGTH:
            raise serializers.ValidationError(
                f"Ensure this field has no more than {USERNAME_MAX_LENGTH} characters."
            )
        try:
            UnicodeUsernameValidator()(normalized)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(list(exc.messages)) from None
        return normalized

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        candidate = User(username=attrs["username"], job_weight=attrs["job_weight"])
        try:
            password_validation.validate_password(attrs["password"], user=candidate)
        except DjangoValidationError as exc:
            raise serializers.ValidationError({"password": list(exc.messages)}) from None
        return attrs


class PasswordChangeInput(KnownFieldsOnly):
    current_password = StringField(
        write_only=True, trim_whitespace=False, min_length=1, max_length=4096, validators=[_NO_NUL]
    )
    new_password = _password(
        help_text="Must also pass Django's validators: not a common password, not too "
        "like the username."
    )


class LoginInput(KnownFieldsOnly):
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
            "max_stored_bytes": limits.max_stored_bytes or None,
        },
        "usage": {
            "unfinished_jobs": usage.unfinished,
            "unfinished_jobs_exact": usage.unfinished_exact,
            "stored_bytes": usage.stored_bytes,
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
    max_stored_bytes = serializers.IntegerField(
        allow_null=True,
        help_text="Bytes of messages and handler parameters your unfinished jobs may hold; "
        "null: no limit.",
    )


class UsageOutput(serializers.Serializer):
    unfinished_jobs = serializers.IntegerField(
        help_text="Your scheduled, queued and running jobs, as the API process that answered "
        "counted them (it reuses a count for a few seconds and adds what it created since)."
    )
    unfinished_jobs_exact = serializers.BooleanField(
        help_text="False when counting stopped: past your limit, or at 1,000,000 per shard "
        "without one."
    )
    stored_bytes = serializers.IntegerField(
        allow_null=True,
        help_text="Bytes your unfinished jobs hold, counted like unfinished_jobs; null when "
        "stored bytes are not limited (then not counted).",
    )


class MeOutput(UserOutput):
    is_staff = serializers.BooleanField()
    limits = LimitsOutput()
    usage = UsageOutput()
