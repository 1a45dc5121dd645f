"""The admin's cluster page (staff only): schedulers, shards, executors, dead letters."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from jobsvc.cluster.executors import executor_rows, partition_holders
from jobsvc.cluster.overview import cluster_overview
from jobsvc.cluster.shard_stats import COUNT_LIMIT


def cluster_page(request: HttpRequest) -> HttpResponse:
    overview = cluster_overview()
    membership = overview.membership.value
    owners = membership.shard_owners if membership else {}
    shards = [
        {"id": shard_id, "stats": part.value, "error": part.error, "zk_owner": owners.get(shard_id)}
        for shard_id, part in enumerate(overview.shards)
    ]
    executors = executor_rows(
        registered=membership.executors if membership else None,
        group=overview.executors.value,
    )
    holders = partition_holders(executors)
    group = overview.executors.value
    owned = {}
    for shard_id, owner in owners.items():
        if owner:
            owned.setdefault(owner, []).append(shard_id)
    context = {
        **admin.site.each_context(request),
        "title": "Cluster",
        "overview": overview,
        "members": [
            {"member": member, "shards": owned.get(member.worker_id, [])}
            for member in (membership.members if membership else [])
        ],
        "shards": shards,
        "executors": executors,
        "partitions": [
            {"lag": partition, "holder": holders.get(partition.partition)}
            for partition in (group.partitions if group else [])
        ],
        "count_limit": COUNT_LIMIT,
        "render_ms": round(overview.seconds * 1000),
    }
    return TemplateResponse(request, "admin/cluster/overview.html", context)
