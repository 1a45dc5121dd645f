from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "jobsvc.cluster"
    label = "cluster"
    verbose_name = "Cluster"
