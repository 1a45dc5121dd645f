from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin

from jobsvc.accounts.models import User


@admin.register(User)
class UserAdmin(DjangoUserAdmin):
    list_display = (
        "username",
        "job_weight",
        "max_unfinished_jobs",
        "create_rate_per_second",
        "max_stored_bytes",
        "is_active",
        "is_staff",
        "date_joined",
    )
    list_editable = ("job_weight",)
    fieldsets = (
        *DjangoUserAdmin.fieldsets,
        ("Scheduling", {"fields": ("job_weight",)}),
        (
            "Limits",
            {"fields": ("max_unfinished_jobs", "max_stored_bytes", "create_rate_per_second")},
        ),
        ("Handlers", {"fields": ("kafka_topics",)}),
    )
    add_fieldsets = (*DjangoUserAdmin.add_fieldsets, ("Scheduling", {"fields": ("job_weight",)}))
