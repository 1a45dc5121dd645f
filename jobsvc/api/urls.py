from django.urls import path
from drf_spectacular.views import SpectacularAPIView

from jobsvc.accounts.apis import LoginApi, MeApi, RefreshApi, UserCreateApi
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
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
]
