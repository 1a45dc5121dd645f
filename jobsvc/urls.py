from django.contrib import admin
from django.urls import include, path

from jobsvc.accounts.admin_login import throttled_admin_login
from jobsvc.api.health import healthz, readyz
from jobsvc.cluster.admin_views import cluster_page
from jobsvc.metrics import metrics_view

urlpatterns = [
    path("api/v1/", include("jobsvc.api.urls")),
    path("admin/cluster/", admin.site.admin_view(cluster_page), name="admin-cluster"),
    # Before admin.site.urls, whose own log-in view it wraps.
    path("admin/login/", throttled_admin_login, name="admin-login"),
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
]

handler400 = "jobsvc.api.errors.json_400"
handler404 = "jobsvc.api.errors.json_404"
handler500 = "jobsvc.api.errors.json_500"
