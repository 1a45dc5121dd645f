"""Admin for jobs, which live on many databases: one shard is listed at a time.

The shard filter picks the database; a search for a job id goes straight to the shard
the id names. Jobs are read-only here apart from the cancel and redrive actions, which
need the change permission on jobs (a staff user who may only view jobs is not offered
them) and leave an entry per job in the admin's log (who, when, what); their write-only
handler parameters (header values) are shown redacted.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from jobsvc import errors
from jobsvc.handlers.redaction import public_params
from jobsvc.jobs.changes import job_cancel, job_retry
from jobsvc.jobs.models import Job
from jobsvc.sharding.ids import InvalidJobId, shard_of
from jobsvc.sharding.shards import UnknownShard, shard_alias, shard_ids


class ShardFilter(admin.SimpleListFilter):
    title = "shard"
    parameter_name = "shard"

    def lookups(self, request, model_admin):
        return [(str(shard_id), f"shard {shard_id}") for shard_id in shard_ids()]

    def queryset(self, request, queryset):
        return queryset  # the database is chosen in JobAdmin.get_queryset


def _selected_alias(request: HttpRequest) -> str:
    raw = request.GET.get(ShardFilter.parameter_name, "0")
    try:
        return shard_alias(int(raw))
    except (ValueError, UnknownShard):
        return shard_alias(0)


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("id", "user_id", "status", "execute_at", "attempts", "shard_id", "updated_at")
    list_filter = (ShardFilter, "status")
    search_fields = ("id",)
    ordering = ("-id",)
    show_full_result_count = False
    actions = ["cancel_jobs", "redrive_jobs"]
    exclude = ("handler_params",)  # shown redacted instead: public_handler_params

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        return Job.objects.using(_selected_alias(request))

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            alias = shard_alias(shard_of(term))
        except (InvalidJobId, UnknownShard):
            return queryset.none(), False
        # The same query (filters, ordering) sent to the shard the id names.
        return queryset.using(alias).filter(pk=term), False

    def get_object(self, request, object_id, from_field=None):
        try:
            return Job.objects.using(shard_alias(shard_of(object_id))).filter(pk=object_id).first()
        except (InvalidJobId, UnknownShard):
            return None

    def get_readonly_fields(self, request, obj=None):
        fields = [field.name for field in Job._meta.fields if field.name != "handler_params"]
        return [*fields, "public_handler_params"]

    @admin.display(description="handler params")
    def public_handler_params(self, obj: Job) -> str:
        return json.dumps(public_params(obj.handler_params), ensure_ascii=False)

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description="Cancel selected jobs that have not started", permissions=["change"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        cancelled = refused = 0
        for job in queryset:
            try:
                job_cancel(user_id=job.user_id, job_id=job.id)
                cancelled += 1
                self.log_change(request, job, "Cancelled by the admin action.")
            except errors.JobNotCancellable:
                refused += 1
        self.message_user(request, f"Cancelled {cancelled} job(s); {refused} had already started.")
        if refused:
            self.message_user(request, "Started jobs cannot be cancelled.", messages.WARNING)

    @admin.action(
        description="Redrive selected failed jobs (new attempts, due now)", permissions=["change"]
    )
    def redrive_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        retried = refused = 0
        for job in queryset:
            try:
                job_retry(
                    user_id=job.user_id,
                    job_id=job.id,
                    extra_attempts=settings.JOB_DEFAULT_MAX_ATTEMPTS,
                )
                retried += 1
                self.log_change(request, job, "Redriven by the admin action.")
            except errors.JobNotRetryable:
                refused += 1
        self.message_user(request, f"Redrove {retried} failed job(s); {refused} had not failed.")
        if refused:
            self.message_user(request, "Only failed jobs can be redriven.", messages.WARNING)
