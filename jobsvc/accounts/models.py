"""Users of the service. Lives in the control database."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import AbstractUser, UserManager
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.utils.deconstruct import deconstructible

from jobsvc.accounts.usernames import MAX_KEY_LENGTH, username_key
from jobsvc.accounts.weights import JOB_WEIGHT_CEILING, JOB_WEIGHT_FLOOR, job_weight_problem

DEFAULT_JOB_WEIGHT = 1.0


@deconstructible
class JobWeightValidator:
    """The deployment's weight bounds, read when it runs (never frozen into a migration)."""

    def __call__(self, value: object) -> None:
        problem = job_weight_problem(
            value, minimum=settings.MIN_JOB_WEIGHT, maximum=settings.MAX_JOB_WEIGHT
        )
        if problem is not None:
            raise ValidationError(problem, code="job_weight")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobWeightValidator)

    def __hash__(self) -> int:
        return hash(JobWeightValidator)


class Users(UserManager):
    def get_by_natural_key(self, username: str) -> User:
        """The user whose name is ``username`` up to case and compatibility forms (log-in)."""
        return self.get(username_key=username_key(username))


class User(AbstractUser):
    """A user; ``job_weight`` is their share of dispatch capacity relative to other users.

    Saving checks the weight against the deployment's bounds, and stores the username in
    NFKC form with its ``username_key`` (``jobsvc.accounts.usernames``), whichever path
    set them.
    """

    # Unique: "\uff53am" (a fullwidth s) and "Sam" are taken once "sam" is.
    username_key = models.CharField(max_length=MAX_KEY_LENGTH, unique=True, editable=False)

    job_weight = models.FloatField(
        default=DEFAULT_JOB_WEIGHT,
        validators=[JobWeightValidator()],
        help_text="Share of dispatch capacity relative to other users with due jobs "
        "(JOBSVC_MIN_JOB_WEIGHT to JOBSVC_MAX_JOB_WEIGHT).",
    )
    # Per-user limits; empty: the deployment's default (JOBSVC_USER_*), 0: no limit.
    max_unfinished_jobs = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Scheduled, queued and running jobs this user may have at once. Empty: "
        "JOBSVC_USER_MAX_UNFINISHED_JOBS; 0: no limit.",
    )
    max_stored_bytes = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="Bytes (messages and handler parameters) this user's unfinished jobs may "
        "hold. Empty: JOBSVC_USER_MAX_STORED_BYTES; 0: no limit.",
    )
    create_rate_per_second = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0)],
        help_text="Jobs this user may create per second in each API process. Empty: "
        "JOBSVC_USER_CREATE_RATE_PER_SECOND; 0: no limit.",
    )
    # Granted by staff: the kafka handler publishes this user's jobs only to these.
    kafka_topics = ArrayField(
        models.CharField(max_length=249),
        default=list,
        blank=True,
        help_text="Kafka topics this user's kafka-handler jobs may publish to, comma-separated: "
        "each one of JOBSVC_KAFKA_HANDLER_ALLOWED_TOPICS, never a system topic.",
    )

    def clean(self) -> None:
        super().clean()  # the username in NFKC form
        from jobsvc.accounts.kafka_topics import kafka_topic_refusals  # imports this module

        taken = User.objects.filter(username_key=username_key(self.username))
        if taken.exclude(pk=self.pk).exists():
            raise ValidationError({"username": "A user with that username already exists."})
        refusals = kafka_topic_refusals(self.kafka_topics)
        if refusals:
            raise ValidationError({"kafka_topics": refusals})

    objects = Users()

    class Meta:
        db_table = "accounts_user"
        constraints = [
            # NaN compares above every number in PostgreSQL, so this refuses it too.
            models.CheckConstraint(
                condition=models.Q(job_weight__gte=JOB_WEIGHT_FLOOR)
                & models.Q(job_weight__lte=JOB_WEIGHT_CEILING),
                name="accounts_user_job_weight_bounds",
            ),
            models.CheckConstraint(
                condition=models.Q(create_rate_per_second__gte=0),
                name="accounts_user_create_rate_not_negative",
            ),
        ]

    def save(self, *args, **kwargs) -> None:
        update_fields = kwargs.get("update_fields")
        if update_fields is None or "job_weight" in update_fields:
            try:
                JobWeightValidator()(self.job_weight)
            except ValidationError as exc:
                raise ValidationError({"job_weight": exc.messages}) from None
        if update_fields is None or "username" in update_fields:
            self.username = self.normalize_username(self.username)
            self.username_key = username_key(self.username)
            if update_fields is not None:
                kwargs["update_fields"] = {*update_fields, "username_key"}
        super().save(*args, **kwargs)


class WebhookSecret(models.Model):
    """A user's webhook signing secret (``whsec_...``), and the one it replaced.

    Created on first use (``jobsvc.accounts.webhook_secrets``). After a rotation the
    previous secret keeps signing beside the new one until ``previous_expires_at``.
    """

    user = models.OneToOneField(
        User, on_delete=models.CASCADE, primary_key=True, related_name="webhook_secret"
    )
    secret = models.CharField(max_length=100)
    created_at = models.DateTimeField()
    previous_secret = models.CharField(max_length=100, blank=True, default="")
    previous_expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "accounts_webhook_secret"

    def __str__(self) -> str:
        return f"webhook secret of user {self.user_id}"  # never the secret itself


class RevokedToken(models.Model):
    """A token that must no longer authenticate (logged out, or replaced by a refresh),
    kept until its own expiry, after which it would fail anyway."""

    jti = models.CharField(max_length=64, primary_key=True)
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+", db_index=False)
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "accounts_revoked_token"
        indexes = [
            # What authentication reads with the user: their unexpired revoked tokens.
            models.Index(fields=["user", "expires_at"], name="accounts_revoked_user_idx"),
            # What the clean-up deletes.
            models.Index(fields=["expires_at"], name="accounts_revoked_expires_idx"),
        ]

    def __str__(self) -> str:
        return f"revoked token {self.jti} of user {self.user_id}"


class ThrottleBucket(models.Model):
    """One throttle's state for one client address or account (``jobsvc.accounts.throttles``):
    the theoretical arrival time of its next request, shared by every API process."""

    key = models.CharField(max_length=100, primary_key=True)  # policy:digest of the identity
    tat = models.DateTimeField()

    class Meta:
        db_table = "accounts_throttle_bucket"
        # What the clean-up deletes: buckets whose time has passed hold nothing.
        indexes = [models.Index(fields=["tat"], name="accounts_throttle_tat_idx")]

    def __str__(self) -> str:
        return f"throttle {self.key} until {self.tat:%Y-%m-%d %H:%M:%S}"
