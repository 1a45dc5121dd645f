from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "jobsvc.cluster"
    label = "cluster"
    verbose_name = "Cluster"

    def ready(self) -> None:
        from django.contrib import admin

        # The admin's home page links to the cluster page (admin/cluster/index.html).
        admin.site.index_template = "admin/cluster/index.html"
