from django.urls import path

from jobsvc.accounts.apis import (
    LoginApi,
    LogoutApi,
    MeApi,
    PasswordChangeApi,
    RefreshApi,
    UserCreateApi,
)
from jobsvc.accounts.webhook_secret_apis import WebhookSecretApi, WebhookSecretRotateApi
from jobsvc.api.schema_view import SchemaApi
from jobsvc.jobs.apis import (
    JobAttemptsApi,
    JobCancelApi,
    JobDetailApi,
    JobListCreateApi,
    JobRescheduleApi,
    JobRetryApi,
    JobsCancelApi,
    JobsRedriveApi,
    JobsRetryApi,
)

urlpatterns = [
    path("users", UserCreateApi.as_view(), name="user-create"),
    path("auth/login", LoginApi.as_view(), name="auth-login"),
    path("auth/refresh", RefreshApi.as_view(), name="auth-refresh"),
    path("me/webhook-secret", WebhookSecretApi.as_view(), name="webhook-secret"),
    path(
        "me/webhook-secret/rotate", WebhookSecretRotateApi.as_view(), name="webhook-secret-rotate"
    ),
    path("auth/logout", LogoutApi.as_view(), name="auth-logout"),
    path("me/password", PasswordChangeApi.as_view(), name="me-password"),
    path("me", MeApi.as_view(), name="me"),
    path("me/jobs", JobListCreateApi.as_view(), name="jobs"),
    # Bulk actions by filter; before me/jobs/<job_id>, which would take their names as ids.
    path("me/jobs/cancel", JobsCancelApi.as_view(), name="jobs-cancel"),
    path("me/jobs/retry", JobsRetryApi.as_view(), name="jobs-retry"),
    path("me/jobs/<str:job_id>", JobDetailApi.as_view(), name="job-detail"),
    path("me/jobs/<str:job_id>/attempts", JobAttemptsApi.as_view(), name="job-attempts"),
    path("me/jobs/<str:job_id>/cancel", JobCancelApi.as_view(), name="job-cancel"),
    path("me/jobs/<str:job_id>/reschedule", JobRescheduleApi.as_view(), name="job-reschedule"),
    path("me/jobs/<str:job_id>/retry", JobRetryApi.as_view(), name="job-retry"),
    path("jobs/redrive", JobsRedriveApi.as_view(), name="jobs-redrive"),
    path("schema/", SchemaApi.as_view(), name="schema"),
]
